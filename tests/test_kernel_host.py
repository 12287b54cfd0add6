"""kernel/host.py: the /proc facts, parsed from canned text, and read from this machine."""

from __future__ import annotations

import os

from kubesvc.kernel import host


def test_parse_stat_start_time_counts_after_the_last_parenthesis():
    fields = " ".join(str(n) for n in range(3, 30))  # field 3 onwards; field 22 is "22"
    assert host.parse_stat_start_time(f"1234 (sleep) {fields}") == "22"
    assert host.parse_stat_start_time(f"1234 (a) b) (c) {fields}") == "22", "a command name holding ') '"
    assert host.parse_stat_start_time("") == "" and host.parse_stat_start_time("1 (x) S 0") == ""


def test_parse_meminfo_total():
    assert host.parse_meminfo_total("MemFree:  10 kB\nMemTotal:       16316412 kB\n") == 16316412
    assert host.parse_meminfo_total("MemFree: 10 kB\n") == 0 and host.parse_meminfo_total("MemTotal: x kB") == 0


def test_this_machine_and_process():
    assert len(host.boot_id()) == 36
    me = host.process_identity(os.getpid())
    assert me.startswith(host.boot_id() + ":") and me == host.process_identity(os.getpid())
    assert host.process_identity(2 ** 22 + 1) == "" and host.process_start_time(2 ** 22 + 1) == ""
    assert host.memory_total_kib() > 0
    assert host.process_root(42) == "/proc/42/root" and host.process_root(None) == ""


def test_machine_facts_for_node_info():
    assert host.os_image()  # PRETTY_NAME, or "Linux"
    assert host.machine_id() == (open("/etc/machine-id").read().strip() if os.path.exists("/etc/machine-id") else "")
    assert isinstance(host.system_uuid(), str)
