"""Which file is this: FileId, of a stat or of what a path leads to now."""

from __future__ import annotations

import os
import stat

from sloth_tray.fileid import FileId, same_entry


def test_a_path_names_the_file_it_leads_to_now(tmp_path):
    folder, file, link = tmp_path / "lane", tmp_path / "job.sh", tmp_path / "link"
    folder.mkdir()
    file.write_text("echo\n")
    link.symlink_to(folder)
    assert FileId.at(folder) == FileId.of(os.stat(folder)) == FileId.at(folder, folder=True)
    assert FileId.at(link, folder=True) == FileId.at(folder)  # a link is followed
    assert FileId.at(file) == FileId.of(os.lstat(file))
    assert FileId.at(file, folder=True) is None  # no folder there
    assert FileId.at(tmp_path / "missing") is None
    os.rename(file, tmp_path / "renamed.sh")
    assert FileId.at(tmp_path / "renamed.sh") == FileId.of(os.lstat(tmp_path / "renamed.sh"))
    assert FileId.at(tmp_path / "renamed.sh") != FileId.at(folder)


def test_an_entry_of_another_kind_in_the_inode_a_file_freed_is_another_entry(tmp_path):
    file = tmp_path / "job.sh"
    file.write_text("echo\n")
    seen = os.lstat(file)
    os.link(file, tmp_path / "twin.sh")
    assert same_entry(os.lstat(tmp_path / "twin.sh"), seen)  # a hard link: that very entry
    # The file unlinked and a link made in its inode number, as ext4 may hand it out.
    fields = list(seen)
    fields[stat.ST_MODE] = stat.S_IFLNK | 0o777
    link_in_its_inode = os.stat_result(fields)
    assert FileId.of(link_in_its_inode) == FileId.of(seen)
    assert not same_entry(link_in_its_inode, seen)
