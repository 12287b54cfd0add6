"""Facts about this machine and its processes that only ``/proc`` knows.

* ``boot_id`` (``/proc/sys/kernel/random/boot_id``): a random UUID the kernel draws at each boot;
  kubelet reports it as ``nodeInfo.bootID`` (cadvisor's ``MachineInfo.BootID``), and with a pid
  and a start time it names one process across pid reuse and reboots.
* a process's start time: field 22 of ``/proc/PID/stat`` (``starttime``, clock ticks since
  boot). The second field, the command name in parentheses, may itself hold spaces and ``)``,
  so fields are counted after the *last* ``)`` (as procps does).
* ``MemTotal`` of ``/proc/meminfo`` in KiB: kubelet's memory capacity (cadvisor reads the same).
* ``/proc/PID/root``: a process's root directory as seen from here, the prefix under which its
  own view of the filesystem (a container's mounts) is reachable.

Each reader returns an empty value (``""``, 0) when the file cannot be read, as the callers
treat a missing fact as unknown rather than fatal.
"""

from __future__ import annotations

BOOT_ID = "/proc/sys/kernel/random/boot_id"
MEMINFO = "/proc/meminfo"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def boot_id() -> str:
    """This boot's ID ("" if unknown)."""
    return _read(BOOT_ID).strip()


def parse_stat_start_time(stat: str) -> str:
    """``starttime`` (field 22) of a ``/proc/PID/stat`` line ("" if it has none)."""
    try:
        return stat.rsplit(")", 1)[1].split()[19]
    except IndexError:
        return ""


def process_start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" if there is no such process)."""
    return parse_stat_start_time(_read(f"/proc/{pid}/stat"))


def process_identity(pid: int) -> str:
    """``<boot id>:<start time>`` of ``pid``: with the pid, what identifies one process across
    pid reuse and reboots ("" if either is unknown)."""
    boot, started = boot_id(), process_start_time(pid)
    return f"{boot}:{started}" if boot and started else ""


def parse_meminfo_total(text: str) -> int:
    """``MemTotal`` in KiB from ``/proc/meminfo`` text (0 if absent)."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return 0
    return 0


def memory_total_kib() -> int:
    """The machine's memory in KiB (0 if unknown)."""
    return parse_meminfo_total(_read(MEMINFO))


def process_root(pid: int | None) -> str:
    """The path prefix under which ``pid``'s own filesystem view is reachable ("" for None: ours)."""
    return f"/proc/{pid}/root" if pid is not None else ""


def os_image() -> str:
    """``PRETTY_NAME`` of /etc/os-release (kubelet's ``nodeInfo.osImage``), "Linux" if unknown."""
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return "Linux"


def machine_id() -> str:
    """/etc/machine-id (``nodeInfo.machineID``; "" if unknown)."""
    return _read("/etc/machine-id").strip()


def system_uuid() -> str:
    """The DMI product UUID (``nodeInfo.systemUUID``; "" if unknown or unreadable)."""
    return _read("/sys/class/dmi/id/product_uuid").strip()
