"""Which file is this: a file's (device, inode), the one way the app tells files apart.

It names a file only while that file exists. Once one is gone, its inode number may go
to the next file made on that file system (ext4 hands a freed one out at once), so two
equal FileIds taken at different times never prove that nothing changed in between:
where that matters, the watched inode's own end says it (daemon/watch.py).
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple


class FileId(NamedTuple):
    device: int
    inode: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileId:
        """The file a stat (or lstat, or fstat) is of."""
        return cls(info.st_dev, info.st_ino)

    @classmethod
    def at(cls, path: str | os.PathLike[str], *, folder: bool = False) -> FileId | None:
        """The file `path` leads to now (links followed); None when there is none, or,
        with `folder`, when what is there is no folder."""
        try:
            info = os.stat(path)
        except OSError:
            return None
        if folder and not stat.S_ISDIR(info.st_mode):
            return None
        return cls.of(info)


def same_entry(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two stats are of one entry, its kind too: a link made in the inode a file
    just freed is another entry, though its FileId is the file's."""
    return stat.S_IFMT(a.st_mode) == stat.S_IFMT(b.st_mode) and FileId.of(a) == FileId.of(b)
