"""Who may use the clock service: root and the members of its group, as the kernel sees a
client's process; and the error that tells anyone else which group that is and how to join it
(on the service's side, and on a client's when the kernel refuses it at the socket)."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

from engine.core.errors import DeviceError


class NotInGroupError(DeviceError):
    """This user may not use the clock service: not in its group (or not yet, in this login)."""


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def process_groups(pid: int) -> set[int]:
    """The supplementary groups the client process really has (not what /etc/group says now:
    a user added to the group counts once they log in again, as for any group)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                return {int(g) for g in line.split()[1:]}
    except (OSError, ValueError):
        pass
    return set()


def _listed(user: str, group: str) -> bool:
    """Whether the group database lists `user` in `group` (as a member, or as its primary group)."""
    try:
        entry = grp.getgrnam(group)
        return user in entry.gr_mem or pwd.getpwnam(user).pw_gid == entry.gr_gid
    except KeyError:
        return False


def not_in_group(who: str, user: str, group: str, where: str = "") -> NotInGroupError:
    """`who` (naming `user`) may not use the clock service `where`: say which group lets them,
    and either how to join it or that joining takes a new login."""
    if _listed(user, group):
        return NotInGroupError(
            f"{who} was added to group {group}, which may use the clock service{where}, after this login began",
            f"log out and in again (or start a shell with `newgrp {group}`); `id` should then list {group}")
    return NotInGroupError(
        f"{who} is not in group {group}, which may use the clock service{where}",
        f"ask an administrator to add you (`sudo usermod -aG {group} {user}`), then log out and in; "
        f"`id` should then list {group}")


def refused_at_socket(path: Path) -> DeviceError:
    """Why the kernel refused this process at the service's socket (EACCES): the socket's group
    is the service's, so the error can name it."""
    user = user_name(os.geteuid())
    try:
        st = os.stat(path)
    except OSError as exc:
        return DeviceError(f"not allowed to reach the clock service at {path} ({exc.strerror})",
                           f"ask an administrator to let you into {path.parent} (`ls -ld {path.parent}`)")
    group = group_name(st.st_gid)
    if st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        return DeviceError(f"the clock service's socket {path} refuses its own group {group} "
                           f"(mode {st.st_mode & 0o777:o})",
                           "the socket must be group-writable: restart the service with its default "
                           "--socket-mode 0660 (`sudo systemctl restart slm-dvfs-clockd`)")
    return not_in_group(f"user {user} (uid {os.geteuid()})", user, group, f" at {path}")
