//! Opening files from an untrusted directory tree: only regular files are ever opened.
//!
//! A FIFO, socket or device where a data file should be must never make a reader hang (opening
//! a FIFO for reading blocks until a writer appears) or touch a device. [`open_regular`] checks
//! the file type before opening, opens without blocking, and checks the opened descriptor
//! again, so a file swapped between the two checks is refused too. [`read_regular`] reads such
//! a file whole with a size cap; [`read_regular_no_symlink`] does the same without following a
//! symbolic link, for a file pgcheckdb wrote itself in a directory others may write to.

use std::ffi::CStr;
use std::fmt;
use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::Path;

/// The error inside an [`io::Error`] for a path that exists but is not a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotRegularFile {
    /// What the path is instead (`directory`, `FIFO`, ...).
    pub what: &'static str,
}

impl fmt::Display for NotRegularFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a regular file but a {}", self.what)
    }
}

impl std::error::Error for NotRegularFile {}

/// A human name for a file type that is not a regular file.
pub fn file_type_name(ft: &FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

/// `Some(what)` when `err` says the path is not a regular file.
pub fn not_regular(err: &io::Error) -> Option<&'static str> {
    err.get_ref()?
        .downcast_ref::<NotRegularFile>()
        .map(|e| e.what)
}

fn refuse(ft: &FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegularFile {
            what: file_type_name(ft),
        },
    )
}

/// Opens `path` (following symlinks) for reading, and for writing when `write`, only if it is a
/// regular file. Never blocks on a FIFO and never opens a device.
pub fn open_regular(path: &Path, write: bool) -> io::Result<File> {
    let ft = std::fs::metadata(path)?.file_type();
    if !ft.is_file() {
        return Err(refuse(&ft));
    }
    let file = open_listed_regular(path, write)?;
    clear_nonblock(&file)?;
    Ok(file)
}

/// Opens a file that a directory listing has just found to be a regular file, with the fewest
/// system calls: `open` without blocking (a FIFO swapped in since the listing does not block)
/// and one `fstat` of the descriptor, which refuses anything but a regular file as
/// [`open_regular`] does. `O_NONBLOCK` stays set: it has no effect on regular files, and the
/// descriptor is only used for positioned reads and writes.
pub fn open_listed_regular(path: &Path, write: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    only_regular(file)
}

/// [`open_listed_regular`] for the entry `name` of the directory `dir` (a descriptor from
/// [`open_directory`]): the kernel looks the name up in that directory alone instead of
/// walking the whole path again, which is a fifth of the cost of opening a small file.
pub fn open_listed_regular_at(dir: &File, name: &CStr, write: bool) -> io::Result<File> {
    let access = if write { libc::O_RDWR } else { libc::O_RDONLY };
    let flags = access | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: a valid directory descriptor, a NUL-terminated name and integer flags.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `openat` just returned this descriptor, and nothing else owns it.
    only_regular(unsafe { File::from_raw_fd(fd) })
}

/// A directory, held to open the files in it by name ([`open_listed_regular_at`]). `O_PATH`:
/// nothing is read through the descriptor.
pub fn open_directory(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(path)
}

/// `file`, if its descriptor is a regular file (one `fstat`, not the `statx` of every field
/// that `File::metadata` asks for); else it is closed and refused.
fn only_regular(file: File) -> io::Result<File> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and a buffer of the right type; `st` is read only after the
    // call succeeded.
    if unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it filled `st`.
    if unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFREG {
        return Ok(file);
    }
    // Not a regular file: the rare path names what it is.
    let ft = file.metadata()?.file_type();
    Err(refuse(&ft))
}

/// Turns `O_NONBLOCK` off again (it has no effect on regular files, but the descriptor is
/// handed to code that expects ordinary blocking I/O).
fn clear_nonblock(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a valid, owned descriptor with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads a whole regular file of at most `max_len` bytes: a longer file is an error (a control
/// file, version file or map file of absurd size is damage, not something to load).
pub fn read_regular(path: &Path, max_len: u64) -> io::Result<Vec<u8>> {
    read_bounded(open_regular(path, false)?, max_len)
}

/// [`read_regular`] for a file pgcheckdb wrote itself in a directory others may write to (the
/// previous `--metrics-file`): the last path component is never followed (`O_NOFOLLOW`), so a
/// symbolic link there is refused as one, as are a FIFO (opened without blocking, then
/// refused), a device, a directory and a file longer than `max_len`.
pub fn read_regular_no_symlink(path: &Path, max_len: u64) -> io::Result<Vec<u8>> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            let ft = std::fs::symlink_metadata(path)?.file_type();
            return Err(refuse(&ft));
        }
        Err(e) => return Err(e),
    };
    let file = only_regular(file)?;
    clear_nonblock(&file)?;
    read_bounded(file, max_len)
}

/// The whole of an opened regular file, refused when longer than `max_len` (also when it grows
/// past it while being read).
fn read_bounded(file: File, max_len: u64) -> io::Result<Vec<u8>> {
    let len = file.metadata()?.len();
    if len > max_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is {len} bytes, more than the {max_len} expected"),
        ));
    }
    let mut data = Vec::with_capacity(len as usize);
    file.take(max_len + 1).read_to_end(&mut data)?;
    if data.len() as u64 > max_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file grew past the {max_len} bytes expected"),
        ));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("16384");
        mkfifo(&fifo);
        for write in [false, true] {
            let err = open_regular(&fifo, write).expect_err("a FIFO is not opened");
            assert_eq!(not_regular(&err), Some("FIFO"), "{err}");
        }
        let err = read_regular(&fifo, 8192).expect_err("a FIFO is not read");
        assert_eq!(not_regular(&err), Some("FIFO"));
        let err = read_regular_no_symlink(&fifo, 8192).expect_err("a FIFO is not read");
        assert_eq!(not_regular(&err), Some("FIFO"));
    }

    #[test]
    fn without_following_a_symlink_only_a_small_regular_file_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("m.prom");
        std::fs::write(&file, b"x 1\n").expect("write");
        assert_eq!(read_regular_no_symlink(&file, 16).expect("read"), b"x 1\n");
        let err = read_regular_no_symlink(&file, 2).expect_err("too long");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        for target in [file.as_path(), Path::new("/dev/zero")] {
            let link = dir.path().join("link.prom");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(target, &link).expect("symlink");
            let err = read_regular_no_symlink(&link, 1 << 20).expect_err("a link is not followed");
            assert_eq!(not_regular(&err), Some("symbolic link"), "{err}");
        }
        let err = read_regular_no_symlink(Path::new("/dev/zero"), 1 << 20).expect_err("device");
        assert_eq!(not_regular(&err), Some("character device"));
        let err = read_regular_no_symlink(dir.path(), 16).expect_err("directory");
        assert_eq!(not_regular(&err), Some("directory"));
        let err = read_regular_no_symlink(&dir.path().join("none"), 16).expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_listed_file_swapped_for_a_fifo_or_directory_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("16384");
        mkfifo(&fifo);
        let err = open_listed_regular(&fifo, false).expect_err("a FIFO is not kept open");
        assert_eq!(not_regular(&err), Some("FIFO"), "{err}");
        assert!(open_listed_regular(&fifo, true).is_err());
        let err = open_listed_regular(dir.path(), false).expect_err("directory");
        assert_eq!(not_regular(&err), Some("directory"));
        let file = dir.path().join("16385");
        std::fs::write(&file, b"x").expect("write");
        assert!(open_listed_regular(&file, false).is_ok());
    }

    #[test]
    fn files_opened_by_name_in_a_directory_descriptor_are_regular_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        mkfifo(&dir.path().join("16384"));
        std::fs::create_dir(dir.path().join("16386")).expect("mkdir");
        std::fs::write(dir.path().join("16385"), b"x").expect("write");
        let handle = open_directory(dir.path()).expect("directory");
        let name = |n: &str| std::ffi::CString::new(n).expect("name");
        for write in [false, true] {
            let err = open_listed_regular_at(&handle, &name("16384"), write)
                .expect_err("a FIFO is not kept open");
            assert_eq!(not_regular(&err), Some("FIFO"), "{err}");
        }
        let err = open_listed_regular_at(&handle, &name("16386"), false).expect_err("directory");
        assert_eq!(not_regular(&err), Some("directory"));
        let err = open_listed_regular_at(&handle, &name("16387"), false).expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let mut file = open_listed_regular_at(&handle, &name("16385"), false).expect("regular");
        let mut text = String::new();
        file.read_to_string(&mut text).expect("read");
        assert_eq!(text, "x");
        assert!(open_directory(&dir.path().join("16385")).is_err());
    }

    #[test]
    fn directory_and_socket_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = open_regular(dir.path(), false).expect_err("directory");
        assert_eq!(not_regular(&err), Some("directory"));
        let sock = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        let err = open_regular(&sock, false).expect_err("socket");
        assert_eq!(not_regular(&err), Some("socket"));
        let err = open_regular(Path::new("/dev/null"), false).expect_err("device");
        assert_eq!(not_regular(&err), Some("character device"));
    }

    #[test]
    fn regular_files_open_and_read_with_a_size_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("PG_VERSION");
        std::fs::write(&path, b"15\n").expect("write");
        assert_eq!(read_regular(&path, 16).expect("read"), b"15\n");
        assert!(read_regular(&path, 2).is_err());
        let err = open_regular(&dir.path().join("missing"), false).expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(not_regular(&err), None);
    }
}
