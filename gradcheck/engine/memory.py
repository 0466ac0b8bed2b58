"""Memory a worker holds outside its processes' pages, which no RSS, PSS or RLIMIT_DATA shows:
files in memory filesystems (tmpfs, devtmpfs, ramfs: /dev/shm, /run, a tmpfs /tmp), open or
written and closed, memfds, memory filesystems it mounts (in a mount namespace of its own too),
and System V shared memory, message queues and semaphore sets.
`Held` finds it for the grader's poll and removes it when the worker stops, with the keys the
worker added to its keyrings (`gradcheck.engine.keyrings`); for a worker of a user of its own,
with every file of that user in the folders anyone may write (`SHARED_FOLDERS`), where it could
leave what it saw for the next worker of that uid.

Whose such memory is cannot be read from the kernel, only from the owner's uid. For a worker of a
user of its own, all of that user's is the worker's. For a worker of the grader's own user (the
default), it is what that uid made since the worker's `Held` was made, and what files of that uid
grew by since: a file or segment another process of the grader's user makes meanwhile is taken
for the worker's too, and one the worker gives to another uid (root may chown) is not.
"""

from __future__ import annotations

import ctypes
import os
import select
import stat
from typing import Callable, Iterable, Iterator

from gradcheck.engine import keyrings, trees

#: filesystems whose files are memory
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "devtmpfs", "ramfs"})
#: bytes of kernel memory each file or folder costs even when empty (an inode and a dentry), so
#: that a million empty files cost what they cost (and a walk of them ends at the limit)
INODE = 1024
_IPC_RMID = 0
#: the System V objects a user can leave behind: each kind's id column in /proc/sysvipc, the
#: bytes one holds (a segment's resident pages, a queue's messages, a semaphore set's
#: semaphores, a cache line of the kernel's each), and how libc removes one. A set also carries
#: data from one worker to the next: a byte in each semaphore's value.
_IPC_KINDS: dict[str, tuple[str, Callable[[dict[str, str]], int],
                            Callable[[ctypes.CDLL, int], int]]] = {
    "shm": ("shmid", lambda row: int(row["rss"]),
            lambda libc, ident: libc.shmctl(ident, _IPC_RMID, None)),
    "msg": ("msqid", lambda row: int(row["cbytes"]),
            lambda libc, ident: libc.msgctl(ident, _IPC_RMID, None)),
    "sem": ("semid", lambda row: 64 * int(row["nsems"]),
            lambda libc, ident: libc.semctl(ident, 0, _IPC_RMID)),
}
#: the folders any user may write to (with the memory filesystems)
SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/lock", "/var/lock")


def memory_mounts(table: str = "/proc/self/mounts") -> list[str]:
    """The mount points of the memory filesystems a process may write to (not read-only), as
    the mount `table` lists them (another process's: /proc/PID/mounts)."""
    found = []
    try:
        lines = read_whole(table).splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[2].decode() in MEMORY_FILESYSTEMS and \
                "ro" not in fields[3].decode().split(","):
            point = fields[1].decode("unicode_escape")  # \040 is a space, and so on
            if point not in found:
                found.append(point)
    return found


class Held:
    """The memory one worker's user holds outside its processes' pages.

    `own`: the uid is the worker's alone (a worker user), so all of that uid's counts and is
    removed; else (the grader's own uid) what exists now is the grader's, and only what appears
    or grows from now on is the worker's."""

    def __init__(self, user: int, own: bool, home: str = "") -> None:
        self.user = user
        self.own = own
        self.home = home  # the worker's home, which is the Worker's to remove
        self._table = _MOUNTS.version()
        self._read_mounts()
        #: the user's files and their sizes as last walked, and the mounts' usage before that walk
        self._sizes: dict[tuple[int, int], int] = {}
        self._growth = 0
        self._usage: tuple[tuple[int, int], ...] | None = None
        #: the size of each file of the user when this was made (none for a worker user)
        self._before = {} if own else {key: size for key, _, size in self._files()}
        self._ipc_before = set() if own else {(kind, ident) for kind, ident, *_ in self._ipc()}
        #: not memory to speak of (the kernel's key quota bounds it), but left as the rest is
        self._keys = keyrings.Left(user, own)

    def bytes(self, pids: Iterable[int]) -> int:
        """Bytes held outside the pages of the processes `pids`: every memfd and file of a memory
        filesystem they hold open, every file of the user in a memory filesystem (less its size
        before), every memory filesystem mounted in a mount namespace of theirs, all of it, and
        the user's System V segments no process has attached (an attached one is in its PSS),
        message queues and semaphore sets. Each file is counted once."""
        pids = list(pids)
        if _MOUNTS.version() != self._table:  # mounted or unmounted since: walk what is there now
            self._table = _MOUNTS.version()
            self._read_mounts()
            self._usage = None
        walked, total = self._walked()
        total += sum(self._grown(key, size) for key, size in self._open(pids) if key not in walked)
        total += self._namespaced(pids)
        return total + sum(size for kind, ident, size, attached in self._ipc()
                           if (kind, ident) not in self._ipc_before and not attached)

    def remove(self) -> None:
        """Remove what the worker left: its files in memory filesystems (those that existed
        before, and those some live process holds open or maps, are not the worker's), the
        folders it made there once empty, its unattached System V segments, its queues and its
        semaphore sets, and the keys it added to its user's keyrings (`keyrings.Left`); and for a
        worker user, every file of that user in `SHARED_FOLDERS`."""
        if self.own:
            for folder in SHARED_FOLDERS:
                remove_files_of(self.user, folder, keep=self.home)
        folders: list[str] = []
        left = [(key, path) for key, path, _ in self._files(folders) if key not in self._before]
        busy = _in_use() if left else set()
        for key, path in left:
            if key not in busy:
                _quietly(os.unlink, path)
        for path in reversed(folders):  # the deepest first
            _quietly(os.rmdir, path)
        libc = ctypes.CDLL(None, use_errno=True)
        for kind, ident, _, attached in self._ipc():
            if (kind, ident) not in self._ipc_before and not attached:
                _IPC_KINDS[kind][2](libc, ident)
        self._keys.remove()

    # --- finding -----------------------------------------------------------------------------

    def _read_mounts(self) -> None:
        """The memory filesystems of this process's mount namespace, and their devices."""
        self.mounts = memory_mounts()
        self._devices = set()
        for point in self.mounts:
            try:
                self._devices.add(os.stat(point).st_dev)
            except OSError:
                pass

    def _namespaced(self, pids: list[int]) -> int:
        """Bytes used in the memory filesystems mounted in a mount namespace of the processes
        `pids` other than this process's (`unshare -m`, which a user namespace lets any user
        do): no folder this process walks holds them, so each is counted whole, once, through
        /proc/PID/root: what statvfs says is used, or where it keeps no count, its walk."""
        own = _namespace("self")
        seen = set(self._devices)
        total = 0
        for pid in pids:
            where = _namespace(pid)
            if where is None or where == own:
                continue
            for point in memory_mounts(f"/proc/{pid}/mounts"):
                path = f"/proc/{pid}/root{point}"
                try:
                    device = os.stat(path).st_dev
                    info = os.statvfs(path)
                except OSError:  # gone meanwhile, or not ours to read
                    continue
                if device in seen:
                    continue
                seen.add(device)
                if info.f_blocks and info.f_files:
                    total += ((info.f_blocks - info.f_bfree) * info.f_frsize
                              + (info.f_files - info.f_ffree) * INODE)
                else:
                    total += sum(size for _, _, size in self._walk(path, device, None))
        return total

    def _walked(self) -> tuple[dict[tuple[int, int], int], int]:
        """The size of each file and folder of the user in the memory filesystems, and what they
        grew by since this was made. Walked again only when some filesystem's count of used
        blocks or inodes changed since the last walk: a file made, removed, grown or shrunk
        changes one of them, and a statvfs per mount costs a hundredth of a walk, which the
        grader would otherwise repeat after every reply."""
        usage = _usage(self.mounts)
        if usage is None or usage != self._usage:  # read before the walk: a change meanwhile
            self._sizes = {key: size for key, _, size in self._files()}  # shows next time
            self._growth = sum(self._grown(key, size) for key, size in self._sizes.items())
            self._usage = usage
        return self._sizes, self._growth

    def _grown(self, key: tuple[int, int], size: int) -> int:
        return max(size - self._before.get(key, 0), 0)

    def _open(self, pids: Iterable[int]) -> Iterator[tuple[tuple[int, int], int]]:
        """((device, inode), size) of each memfd or memory-filesystem file the processes hold
        open (a memfd, or a file unlinked after opening, is in no folder)."""
        for pid in pids:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                path = f"/proc/{pid}/fd/{fd}"
                try:
                    info = os.stat(path)
                    if stat.S_ISREG(info.st_mode) and (
                            info.st_dev in self._devices
                            or os.readlink(path).startswith("/memfd:")):
                        yield (info.st_dev, info.st_ino), _size(info)
                except OSError:
                    continue

    def _files(self, folders: list[str] | None = None
               ) -> Iterator[tuple[tuple[int, int], str, int]]:
        """((device, inode), path, size) of each file and folder of the user in the memory
        filesystems; the user's folders are added to `folders` too, parents first."""
        seen: set[int] = set()
        for point in self.mounts:
            try:
                device = os.stat(point).st_dev
            except OSError:
                continue
            if device not in seen:  # a filesystem mounted twice is walked once
                seen.add(device)
                yield from self._walk(point, device, folders)

    def _walk(self, top: str, device: int, folders: list[str] | None
              ) -> Iterator[tuple[tuple[int, int], str, int]]:
        """The user's entries below `top`, on its filesystem: a walk without recursion, as a
        submission can nest folders deeper than Python recurses (gradcheck.engine.trees)."""
        waiting = [top]
        while waiting:
            folder = waiting.pop()
            entries = self._entries(folder)
            for entry, info in _on(device, entries):
                if stat.S_ISDIR(info.st_mode):
                    if info.st_uid == self.user:
                        yield (info.st_dev, info.st_ino), entry.path, INODE
                        if folders is not None:
                            folders.append(entry.path)
                    waiting.append(entry.path)
                elif info.st_uid == self.user:
                    yield (info.st_dev, info.st_ino), entry.path, _size(info)

    def _entries(self, folder: str) -> list[os.DirEntry[str]]:
        """What `folder` holds, or nothing when it cannot be read."""
        try:
            return list(os.scandir(folder))
        except PermissionError:
            pass
        except OSError:
            return []
        # a folder of the grader's own user that it made unreadable to hide what is in it
        try:
            if self.own or os.stat(folder).st_uid != os.geteuid():
                return []
            os.chmod(folder, 0o700)
            return list(os.scandir(folder))
        except OSError:
            return []

    def _ipc(self) -> Iterator[tuple[str, int, int, bool]]:
        """(kind, id, bytes, attached) of the user's System V shared memory segments ("shm"),
        message queues ("msg") and semaphore sets ("sem")."""
        for kind, (id_column, size, _) in _IPC_KINDS.items():
            for row in _table(f"/proc/sysvipc/{kind}"):
                try:
                    if self.user in (int(row["uid"]), int(row["cuid"])):
                        attached = kind == "shm" and int(row["nattch"]) > 0
                        yield kind, int(row[id_column]), size(row), attached
                except (KeyError, ValueError):
                    continue


def remove_files_of(user: int, folder: str, keep: str = "") -> None:
    """Remove every file and folder of `user` in `folder`, and in each folder below it that
    other users may enter (only there can that user have put one), on its filesystem, but
    `keep`. Symbolic links are removed, never followed; no folder is too deep (trees.remove)."""
    try:
        device = os.stat(folder).st_dev
    except OSError:
        return
    waiting = [folder]
    while waiting:
        try:
            entries = list(os.scandir(waiting.pop()))
        except OSError:
            continue
        for entry, info in _on(device, entries):
            if entry.path == keep:
                continue
            if info.st_uid == user:
                if stat.S_ISDIR(info.st_mode):
                    trees.remove(entry.path)
                else:
                    _quietly(os.unlink, entry.path)
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IXOTH:
                waiting.append(entry.path)


def _on(device: int, entries: list[os.DirEntry[str]]
        ) -> Iterator[tuple[os.DirEntry[str], os.stat_result]]:
    """Each of the folder's `entries` on the filesystem `device` (not another one mounted
    there), with its own status (a symbolic link's, not its target's)."""
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_dev == device:
            yield entry, info


def _usage(mounts: list[str]) -> tuple[tuple[int, int], ...] | None:
    """(used blocks, used inodes) of each mount, or None when one of them keeps no count (ramfs,
    or a tmpfs without a size or inode limit, reports zeros) or cannot be read."""
    usage = []
    for point in mounts:
        try:
            info = os.statvfs(point)
        except OSError:
            return None
        if not info.f_blocks or not info.f_files:
            return None
        usage.append((info.f_blocks - info.f_bfree, info.f_files - info.f_ffree))
    return tuple(usage)


class _MountTable:
    """Whether this process's table of mounts changed: the kernel marks /proc/self/mounts with
    a priority event at each mount or unmount (proc(5)), so a poll of it costs no read of the
    table. Opened anew in a forked process: a change one process polled is not polled again by
    another through the same open file."""

    def __init__(self) -> None:
        self._pid = 0
        self._fd: int | None = None  # a bare descriptor, open for the process's life
        self._watch = select.poll()
        self._changes = 0

    def version(self) -> int:
        """A number that is different after every change of the table since the last call."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._watch = select.poll()
            if self._fd is not None:  # the parent's, inherited: this process's copy of it
                os.close(self._fd)
            try:
                self._fd = os.open("/proc/self/mounts", os.O_RDONLY | os.O_CLOEXEC)
                self._watch.register(self._fd, select.POLLPRI)
            except OSError:  # no poll to be had: taken as changed at every call
                self._fd = None
            self._changes += 1
        if self._fd is None or self._watch.poll(0):
            self._changes += 1
        return self._changes


_MOUNTS = _MountTable()


def _namespace(pid: int | str) -> tuple[int, int] | None:
    """The mount namespace of a process, or None when it is gone or cannot be read."""
    try:
        info = os.stat(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _size(info: os.stat_result) -> int:
    return info.st_blocks * 512 + INODE


def read_whole(path: str) -> bytes:
    """A small file's bytes (a /proc entry), read without a buffered file object, which costs
    as much again: the grader reads a few after every reply."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _table(path: str) -> list[dict[str, str]]:
    """The rows of a /proc/sysvipc table, by column name."""
    try:
        header, *rows = read_whole(path).decode().splitlines()
    except (OSError, ValueError):
        return []
    names = header.split()
    return [dict(zip(names, row.split())) for row in rows]


def _in_use() -> set[tuple[int, int]]:
    """(device, inode) of every file some live process holds open or maps."""
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                info = os.stat(f"/proc/{name}/fd/{fd}")
                found.add((info.st_dev, info.st_ino))
            except OSError:
                pass
        try:
            with open(f"/proc/{name}/maps", "rb") as f:
                maps = f.read().splitlines()
        except OSError:
            continue
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) >= 5 and fields[4] != b"0":
                major, minor = (int(part, 16) for part in fields[3].split(b":"))
                found.add((os.makedev(major, minor), int(fields[4])))
    return found


def _quietly(action: Callable[..., object], *args: object) -> None:
    try:
        action(*args)
    except OSError:
        pass
