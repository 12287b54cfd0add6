"""A container's private mount namespace: its volumes at their ``mountPath``s, the host untouched.

A container runtime gives every container a root filesystem of its own and bind-mounts the
kubelet's volume directories onto the ``volumeMounts`` paths in it (runc's ``mount`` entries;
containerd sorts them by path depth so an outer mount never hides an inner one). kubesvc has no
images: a container is a host process that sees the host's filesystem. This module gives it the
same view *plus* its volumes, without creating or mounting anything the host can see:

1. The command starts through this file, run as a script by the same interpreter
   (``python3 -I -S mounts.py PLAN -- ARGV``, isolated from the container's ``PYTHON*``
   variables; after ``ip netns exec``, which has entered the Pod's network namespace). It calls
   ``unshare(CLONE_NEWNS)`` and makes every mount a slave (``MS_REC|MS_SLAVE`` on ``/``, runc's
   default root propagation): nothing mounted from here on propagates back to the host.
2. A tmpfs on the agent's staging directory becomes the container's root. Every entry of the
   host's ``/`` appears in it: directories and files bind-mounted recursively from the host,
   symbolic links copied. So the container sees the host's files, and writes to them reach the
   host as before.
3. A mount point the host lacks (``/var/run/secrets/kubernetes.io/serviceaccount`` on a host
   without ``/run/secrets``) needs directories made somewhere the host does not see: each host
   directory on the way to it (``/``, ``/run``) is *shadowed*, a tmpfs instead of a bind with
   every host entry bound back into it; the missing directories are made in the tmpfs. Symbolic
   links on the way are resolved on the host first (``/var/run`` -> ``/run``), as runc resolves
   them inside the rootfs. New top-level names in a shadowed directory live in that tmpfs, like
   a container's writable layer.
4. Each volume is bind-mounted; ``readOnly`` ones are then remounted ``MS_RDONLY``. A mount
   point inside another volume is made inside that volume, as runc does. With
   ``securityContext.readOnlyRootFilesystem`` the container's root is made read-only first,
   once every mount point exists: the staging tmpfs and every host entry in it, recursively
   (``mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)``, per mount, so the host's own mounts
   are untouched), as runc remounts the rootfs ``MS_RDONLY``; ``/dev``, ``/proc`` and ``/sys``
   stay as they are (a runtime mounts those itself: ``/dev`` and ``/dev/shm`` writable), and
   the volumes, bound afterwards, keep their own mode. A write to ``/`` (``/tmp``, ``/etc``)
   fails with ``EROFS``; a write to a volume works.
5. ``chroot`` into the new root, detach the copy of the staging directory that the binds carry,
   ``chdir`` to the working directory, ``exec`` the command: the PID the agent holds is the
   container's.

The same script gives the container what a runtime's sandbox and process spec give it: the
Pod's hostname in a UTS namespace of its own (``unshare(CLONE_NEWUTS)``, ``sethostname``; the
kubelet's ``GeneratePodHostNameAndDomain`` decides the name) and, last before the exec, the
user and groups it runs as (``setgroups``, ``setgid``, ``setuid``: the effective
``securityContext.runAsUser``/``runAsGroup``; a user without a group takes its primary group
from ``/etc/passwd`` as the container sees it, else 0, as containerd does for an image user),
after the capabilities it may not have left the bounding set (``PR_CAPBSET_DROP``).
A container without volume mounts (nor a read-only root filesystem) keeps the host's mount
namespace.

Failures are reported on a status pipe the agent passes (close-on-exec: end of file without a
word means the command was executed), worded as runc's (``error mounting "SRC" to rootfs at
"DST": ...``), so the agent reports them as the container's ``StartError``.

Every container gets its own namespace, as with a runtime; containers of one Pod share their
volumes because they bind the same directories, and a ``..data`` swap of the atomic writer is
seen through every bind at once. :func:`in_container` enters a running container's namespaces
(``nsenter``), for commands that must see what it sees.

Only the Python standard library is used here: the script runs before anything else exists.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import posixpath
import stat
import sys

if __name__ == "__main__":
    # The start helper (``main``: one per container start) uses none of the agent-side types
    # below, so it skips importing dataclasses, json, shutil and collections (with what they
    # import, about 40 of the ~70 ms of CPU a start took); the classes stay plain there.
    def dataclass(cls=None, **_options):
        return cls if cls is not None else (lambda plain: plain)

    def field(**_options):
        return None
else:
    import json
    from collections.abc import Callable, Sequence
    from dataclasses import dataclass, field

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
MNT_DETACH = 0x2
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (the generic syscall table), Linux 5.12+
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
# the runtime's own filesystems in a container's root: a read-only root filesystem leaves them be
RUNTIME_MOUNTS = ("dev", "proc", "sys")

SCRIPT = os.path.abspath(__file__)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NSENTER = "nsenter"
SETPRIV = "setpriv"  # util-linux, as nsenter


@dataclass(frozen=True)
class BindMount:
    """One volume mount: the host path ``source`` seen at ``target`` inside the container."""

    source: str
    target: str
    read_only: bool = False


# linux/capability.h, in bit order
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
                "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE",
                "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
                "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
                "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE")
PR_CAPBSET_DROP = 24


@dataclass(frozen=True)
class Identity:
    """What the container is called and runs as (None: left as the agent's); ``capabilities``
    the names it keeps in its bounding set (None: all of the agent's)."""

    hostname: str | None = None
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    capabilities: tuple[str, ...] | None = None

    def to_dict(self) -> dict:
        return {"hostname": self.hostname, "uid": self.uid, "gid": self.gid, "groups": list(self.groups),
                "capabilities": list(self.capabilities) if self.capabilities is not None else None}


@dataclass(frozen=True)
class MountPlan:
    """What the script does, in order: ``shadowed`` host directories (parents first) become
    tmpfs copies, then each bind, outermost first."""

    root: str
    shadowed: tuple[str, ...]
    binds: tuple[BindMount, ...]
    file_targets: frozenset[str] = field(default_factory=frozenset)
    read_only_root: bool = False  # securityContext.readOnlyRootFilesystem

    def to_dict(self) -> dict:
        return {"root": self.root, "shadowed": list(self.shadowed), "fileTargets": sorted(self.file_targets),
                "binds": [{"source": b.source, "target": b.target, "readOnly": b.read_only} for b in self.binds],
                "readOnlyRoot": self.read_only_root}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


class MountPlanError(ValueError):
    """A mount that cannot be made (worded like runc's configuration errors)."""


def _depth(path: str) -> int:
    return len([p for p in path.split("/") if p])


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/", "/a", "/a/b"]``."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))]


def _inside(path: str, directory: str) -> bool:
    return directory == "/" or path == directory or path.startswith(directory.rstrip("/") + "/")


def plan_mounts(mounts: Sequence[BindMount], root: str, *, exists: Callable[[str], bool] = os.path.lexists,
                is_dir: Callable[[str], bool] = os.path.isdir, resolve: Callable[[str], str] = os.path.realpath,
                read_only_root: bool = False) -> MountPlan:
    """The plan for ``mounts`` (pure given the three host probes, which tests replace), the
    container's root read-only when ``read_only_root``.

    Mounts are taken outermost first (stable by path depth, containerd's ``sortMounts``). A
    target under an earlier target is made inside that volume; any other target has its host
    symbolic links resolved, and every host directory from ``/`` down to its deepest existing
    ancestor is shadowed when the target itself is missing on the host."""
    ordered = sorted(mounts, key=lambda m: _depth(posixpath.normpath(m.target or ".")))
    shadowed: set[str] = set()
    binds: list[BindMount] = []
    file_targets: set[str] = set()
    placed: list[str] = []
    for mount in ordered:
        if not mount.target.startswith("/"):
            raise MountPlanError(f'mount destination {mount.target} is not absolute')
        target = posixpath.normpath(mount.target)
        if target in ("/", "//"):
            raise MountPlanError(f'invalid mount destination "{mount.target}": cannot mount over the root')
        if not any(_inside(target, outer) for outer in placed):
            target = resolve(target)
            if target == "/":
                raise MountPlanError(f'invalid mount destination "{mount.target}": cannot mount over the root')
            if not exists(target):
                existing = next(a for a in reversed(_ancestors(target)) if exists(a))
                shadowed.update(_ancestors(existing) + [existing])
        binds.append(BindMount(mount.source, target, mount.read_only))
        if not is_dir(mount.source):
            file_targets.add(target)
        placed.append(target)
    return MountPlan(root, tuple(sorted(shadowed, key=_depth)), tuple(binds), frozenset(file_targets), read_only_root)


def in_mount_namespace(plan: MountPlan | None, argv: Sequence[str], *, cwd: str, status_fd: int,
                       identity: Identity = Identity()) -> list[str]:
    """``argv`` started through this script with ``plan`` (None: no mount namespace) and
    ``identity`` (see the module docstring); ``status_fd`` is the write end of the status pipe,
    passed to the child."""
    spec = {"mounts": plan.to_dict() if plan is not None else None, **identity.to_dict()}
    # marshal (built in, same interpreter on both sides), not json: nothing to import in the helper
    return [sys.executable, "-I", "-S", SCRIPT, marshal.dumps(spec).hex(), cwd, str(status_fd), "--", *argv]


def in_container(pid: int, argv: Sequence[str]) -> list[str]:
    """``argv`` run in the namespaces (network, mount, UTS), root and working directory of the
    running process ``pid``, as its user, group and supplementary groups, and within its
    capability bounding set (``setpriv``, as seen in the container): what an exec into a
    container does (runc's exec takes the container's process spec, capabilities included, so
    an exec'd root shell has no capability the container was denied)."""
    credentials = process_credentials(pid)
    options: list[str] = []
    if credentials is not None and credentials != (0, 0, ()) and credentials != (0, 0, (0,)):  # root as the helper leaves it
        uid, gid, groups = credentials
        options = [f"--reuid={uid}", f"--regid={gid}", f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"]
    bounding = process_bounding_set(pid)
    if bounding is not None and bounding != process_bounding_set(os.getpid()):  # narrowed by the helper: the same for the exec
        options.append(bounding_set_option(bounding))
    run_as = [SETPRIV, *options, "--"] if options else []
    return [NSENTER, f"--target={pid}", "--net", "--mount", "--uts", "--root", "--wd", *run_as, *argv]


def bounding_set_option(mask: int) -> str:
    """setpriv's ``--bounding-set`` keeping exactly the capabilities of ``mask`` (a ``CapBnd``)."""
    return "--bounding-set=-all" + "".join(f",+{name.lower()}" for bit, name in enumerate(CAPABILITIES) if mask >> bit & 1)


def bounding_set_from_status(text: str) -> int | None:
    """The ``CapBnd`` mask of a ``/proc/<pid>/status``."""
    for line in text.splitlines():
        if line.startswith("CapBnd:"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return None
    return None


def process_bounding_set(pid: int) -> int | None:
    """Process ``pid``'s capability bounding set (None: it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return bounding_set_from_status(status.read())
    except OSError:
        return None


def credentials_from_status(text: str) -> tuple[int, int, tuple[int, ...]] | None:
    """(effective uid, effective gid, supplementary groups) from a ``/proc/<pid>/status``."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        uid = int(fields["Uid"].split()[1])
        gid = int(fields["Gid"].split()[1])
        groups = tuple(int(g) for g in fields.get("Groups", "").split())
    except (KeyError, IndexError, ValueError):
        return None
    return uid, gid, groups


def process_credentials(pid: int) -> tuple[int, int, tuple[int, ...]] | None:
    """Who process ``pid`` runs as (None: it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return credentials_from_status(status.read())
    except OSError:
        return None


# ---- memory-backed volumes on the host (the agent's side) ----------------------------------------


def mount_tmpfs(path: str, size_bytes: int | None, mode: int) -> None:
    """A tmpfs at ``path`` (an ``emptyDir`` of medium ``Memory``, as the kubelet's
    ``setupTmpfs`` mounts it: ``size=<bytes>`` when a size is known, ``mode`` its root's mode),
    where the host sees it; nothing when one is already there (a set-up done again)."""
    if os.path.ismount(path):
        return
    options = f"mode={mode:o}" + (f",size={size_bytes}" if size_bytes else "")
    _Libc().mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, options)


def mounts_under(directory: str, mountinfo: str | None = None) -> list[str]:
    """The mount points at or under ``directory`` (``/proc/self/mountinfo``), deepest first."""
    if mountinfo is None:
        with open("/proc/self/mountinfo") as source:
            mountinfo = source.read()
    base = directory.rstrip("/")
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
            if point == base or point.startswith(base + "/"):
                found.append(point)
    return sorted(set(found), key=lambda point: (_depth(point), point), reverse=True)


def unmount_all_under(directory: str) -> None:
    """Every mount at or under ``directory`` detached (``MNT_DETACH``), deepest first, so the
    directory can be removed: a Pod's tmpfs volumes when the Pod goes."""
    libc = _Libc()
    for point in mounts_under(directory):
        try:
            libc.umount_detach(point)
        except OSError:
            pass  # gone meanwhile


# ---- the script's side: runs in the child, between ip netns exec and the container's command ----


class _Libc:
    def __init__(self) -> None:
        # the interpreter's own libc (dlopen of the program): ctypes.util.find_library would
        # run /sbin/ldconfig -p, a process per container start
        self.lib = ctypes.CDLL(None, use_errno=True)
        self.lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self.lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

    @staticmethod
    def _check(result: int, what: str) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def unshare(self, flags: int) -> None:
        self._check(self.lib.unshare(flags), "unshare")

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        def enc(text):
            return text.encode() if text is not None else None

        self._check(self.lib.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def sethostname(self, name: str) -> None:
        encoded = name.encode()
        self._check(self.lib.sethostname(encoded, len(encoded)), "sethostname")

    def umount_detach(self, target: str) -> None:
        self._check(self.lib.umount2(target.encode(), MNT_DETACH), f"umount {target}")

    def read_only_recursively(self, target: str) -> None:
        """``mount_setattr(AT_FDCWD, target, AT_RECURSIVE, {attr_set: MOUNT_ATTR_RDONLY})``: the
        mount at ``target`` and every mount under it read-only (each mount's own flag: the
        host's mounts they were bound from stay writable)."""
        attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr: set, clr, propagation, userns_fd
        self.lib.syscall.restype = ctypes.c_long
        result = self.lib.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), ctypes.c_char_p(target.encode()),
                                  ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
        self._check(result, f"mount_setattr {target}")


class MountFailed(Exception):
    pass


def _tmpfs_like(libc: _Libc, host_dir: str, inside: str) -> None:
    info = os.stat(host_dir)
    libc.mount("tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={stat.S_IMODE(info.st_mode):o},uid={info.st_uid},gid={info.st_gid}")


def _populate(libc: _Libc, root: str, host_dir: str, shadowed: set[str]) -> None:
    """Make ``root + host_dir`` (a fresh tmpfs) look like ``host_dir``: binds and copied links."""
    for name in sorted(os.listdir(host_dir)):
        host = posixpath.join(host_dir, name)
        inside = root + host
        info = os.lstat(host)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(host), inside)
        elif stat.S_ISDIR(info.st_mode):
            os.mkdir(inside, 0o755)
            if host in shadowed:
                _tmpfs_like(libc, host, inside)
                _populate(libc, root, host, shadowed)
            else:
                libc.mount(host, inside, None, MS_BIND | MS_REC)
        else:
            with open(inside, "w"):
                pass
            try:
                libc.mount(host, inside, None, MS_BIND)
            except OSError:
                os.unlink(inside)  # a socket or device that will not bind: left out


def _make_mount_point(path: str, as_file: bool) -> None:
    os.makedirs(posixpath.dirname(path), mode=0o755, exist_ok=True)
    if as_file:
        if not os.path.lexists(path):
            with open(path, "w"):
                pass
    elif not os.path.isdir(path):
        os.mkdir(path, 0o755)


def set_up(plan: dict, cwd: str, libc: _Libc | None = None) -> None:
    """Steps 1-5 of the module docstring, short of the exec. Raises MountFailed."""
    libc = libc or _Libc()
    root = plan["root"]
    try:
        libc.unshare(CLONE_NEWNS)
        libc.mount(None, "/", None, MS_REC | MS_SLAVE)
        libc.mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
        _populate(libc, root, "/", set(plan["shadowed"]))
    except OSError as err:
        raise MountFailed(f"error preparing the container's root at {root}: {err.strerror or err}") from None
    file_targets = set(plan.get("fileTargets") or ())
    if plan.get("readOnlyRoot"):
        # every mount point first (they may be new directories in the root), then read-only
        for bind in plan["binds"]:
            try:
                _make_mount_point(root + bind["target"], bind["target"] in file_targets)
            except OSError as err:
                raise MountFailed(f'error mounting "{bind["source"]}" to rootfs at "{bind["target"]}": {err.strerror or err}') from None
        read_only_root(libc, root)
    for bind in plan["binds"]:
        inside = root + bind["target"]
        try:
            _make_mount_point(inside, bind["target"] in file_targets)
            libc.mount(bind["source"], inside, None, MS_BIND)
            if bind["readOnly"]:
                libc.mount(None, inside, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        except OSError as err:
            raise MountFailed(f'error mounting "{bind["source"]}" to rootfs at "{bind["target"]}": {err.strerror or err}') from None
    try:
        os.chroot(root)
        os.chdir("/")
        if os.path.ismount(root):
            libc.umount_detach(root)  # the staging tmpfs, seen again through a bind of its host parent
        os.chdir(cwd)
    except OSError as err:
        raise MountFailed(f'chdir to cwd ("{cwd}") set in config.json failed: {err.strerror or err}') from None


def read_only_root(libc: _Libc, root: str) -> None:
    """The container's root read-only (the staging tmpfs itself, then each top-level entry's
    mounts recursively) but for the runtime's ``/dev``, ``/proc`` and ``/sys``. Raises
    MountFailed."""
    try:
        libc.mount(None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        for name in sorted(os.listdir(root)):
            inside = posixpath.join(root, name)
            if name in RUNTIME_MOUNTS or os.path.islink(inside) or not os.path.ismount(inside):
                continue
            libc.read_only_recursively(inside)
    except OSError as err:
        raise MountFailed(f"error making the container's root read-only (readOnlyRootFilesystem): {err.strerror or err}") from None


def set_hostname(hostname: str, libc: _Libc | None = None) -> None:
    """A UTS namespace of the container's own, named ``hostname``. Raises MountFailed."""
    libc = libc or _Libc()
    try:
        libc.unshare(CLONE_NEWUTS)
        libc.sethostname(hostname)
    except OSError as err:
        raise MountFailed(f"error setting the hostname {hostname}: {err.strerror or err}") from None


def bound_capabilities(keep: Sequence[str], libc: _Libc | None = None) -> None:
    """Every capability not in ``keep`` out of the bounding set (``PR_CAPBSET_DROP``; before the
    user is changed, while CAP_SETPCAP is held): not even root regains them after the exec."""
    libc = libc or _Libc()
    kept = {CAPABILITIES.index(name) for name in keep}
    with open("/proc/sys/kernel/cap_last_cap") as last:
        highest = int(last.read())
    for cap in range(highest + 1):
        if cap not in kept and libc.lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise MountFailed(f"unable to drop capability {cap}: {os.strerror(errno)}")


def _account(uid: int):
    """The container's /etc/passwd entry for ``uid`` (None: it has none)."""
    import pwd  # built in

    try:
        return pwd.getpwuid(uid)
    except KeyError:
        return None


def become(uid: int | None, gid: int | None, groups: Sequence[int]) -> None:
    """The container's user, group and supplementary groups (dropped last, as runc does), and
    ``HOME`` when the container's environment has none: the account's home, else ``/`` (runc's
    ``setupUser``)."""
    account = _account(os.getuid() if uid is None else uid)
    if "HOME" not in os.environ:
        os.environ["HOME"] = account.pw_dir if account is not None and account.pw_dir else "/"
    if uid is None and gid is None and not groups:
        return
    if gid is None:
        gid = account.pw_gid if uid is not None and account is not None else 0
    try:
        os.setgroups(sorted({gid, *groups}))
        os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
    except OSError as err:
        raise MountFailed(f"unable to set up user {uid}:{gid}: {err.strerror or err}") from None


def _report(status_fd: int, message: str) -> None:
    try:
        os.write(status_fd, message.encode(errors="replace"))
    except OSError:
        pass


def main(args: Sequence[str]) -> int:
    plan_text, cwd, fd_text, separator, *argv = args
    status_fd = int(fd_text)
    os.set_inheritable(status_fd, False)  # closed by the exec below: end of file means success
    if separator != "--" or not argv:
        _report(status_fd, "no command")
        return 127
    spec = marshal.loads(bytes.fromhex(plan_text))
    try:
        if spec.get("hostname"):
            set_hostname(spec["hostname"])
        if spec.get("mounts") is not None:
            set_up(spec["mounts"], cwd)
        else:
            os.chdir(cwd)
        if spec.get("capabilities") is not None:
            bound_capabilities(spec["capabilities"])
        become(spec.get("uid"), spec.get("gid"), spec.get("groups") or ())
    except MountFailed as err:
        _report(status_fd, f"failed to create containerd task: {err}")
        return 127
    except OSError as err:
        _report(status_fd, f'failed to create containerd task: chdir to cwd ("{cwd}") set in config.json failed: {err.strerror or err}')
        return 127
    executable = _find_executable(argv[0])
    if executable is None:
        _report(status_fd, f'exec: "{argv[0]}": executable file not found in $PATH')
        return 127
    try:
        os.execve(executable, argv, os.environ)
    except OSError as err:
        _report(status_fd, f'exec: "{argv[0]}": {err.strerror or err}')
    return 127


def _find_executable(argv0: str) -> str | None:
    """Where ``argv0`` resolves in the container's view (its PATH, or its working directory)."""
    if "/" in argv0:
        return argv0 if os.path.isfile(argv0) and os.access(argv0, os.X_OK) else None
    for directory in os.environ.get("PATH", DEFAULT_PATH).split(os.pathsep):  # shutil.which's walk, without importing shutil
        candidate = os.path.join(directory or os.curdir, argv0)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
