//! The one rule for every file the program writes (checkpoints, exports,
//! dumps, reports, screenshots, rescue files, the app's saves): never over
//! what the user has.
//!
//! Before any work is done, an output path is refused when it
//! - names a folder, or is a device, a pipe, a socket or any other file that
//!   is not a regular file (never written, whatever the flags);
//! - is the same file as an input of the command (compared by device and
//!   inode, through symlinks), so `train --out corpus.txt --corpus
//!   corpus.txt` cannot replace the text it learns from;
//! - exists and was not written by this run, unless the user said to replace
//!   it (`--force`, or a confirmation in the app);
//! - is being written by another tinygpt: a lock file beside the target
//!   (`NAME.lock`, holding the writer's pid) is taken for the whole run and
//!   removed when it ends; a lock whose process is gone is stale and taken
//!   over.
//!
//! Default names that are taken get a number ([`numbered`]):
//! `tinygpt-small.safetensors`, then `tinygpt-small-2.safetensors`, ….
//! The bytes themselves go through [`write_atomic`]: a temporary file beside
//! the target, renamed over it, so a file is the old one or the new one.

use std::path::{Path, PathBuf};

/// An input of a command, for the messages: what it is and the flag that
/// names it (`--corpus`).
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub path: &'a Path,
    pub flag: &'a str,
}

impl<'a> Input<'a> {
    pub fn new(flag: &'a str, path: &'a Path) -> Self {
        Self { path, flag }
    }
}

/// A path checked by [`claim`] and locked for this run: other tinygpt runs
/// refuse it until it is dropped (or [`Claim::release`]d before an exit).
#[derive(Debug)]
pub struct Claim {
    path: PathBuf,
    lock: Option<PathBuf>,
}

impl Claim {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the lock now (before `std::process::exit`, which runs no
    /// destructors).
    pub fn release(&mut self) {
        if let Some(lock) = self.lock.take() {
            let _ = std::fs::remove_file(lock);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.release();
    }
}

/// Checks `path` against the rule (see the module) and takes its lock.
/// `flag` names the option that gave the path (`--out`), for the messages;
/// `force` allows replacing an existing regular file that is no input.
pub fn claim(path: &Path, flag: &str, inputs: &[Input], force: bool) -> Result<Claim, String> {
    check(path, flag, inputs, force)?;
    let lock = take_lock(path, flag)?;
    Ok(Claim {
        path: path.to_path_buf(),
        lock: Some(lock),
    })
}

/// The first of `STEM.EXT`, `STEM-2.EXT`, `STEM-3.EXT`, … in `dir` that does
/// not exist and is not locked by another run, claimed.
pub fn numbered(dir: &Path, stem: &str, ext: &str, flag: &str) -> Result<Claim, String> {
    for i in 1..10_000 {
        let name = if i == 1 {
            format!("{stem}.{ext}")
        } else {
            format!("{stem}-{i}.{ext}")
        };
        let path = dir.join(name);
        if exists(&path) || locked(&path) {
            continue;
        }
        match claim(&path, flag, &[], false) {
            Ok(claim) => return Ok(claim),
            // Taken in the meantime by another run: try the next number.
            Err(_) if exists(&path) || locked(&path) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(format!(
        "{stem}.{ext} .. {stem}-9999.{ext} all exist in {}; give a name with {flag}",
        shown_dir(dir)
    ))
}

/// The rule without the lock: for a path that is written at once (the app's
/// saves, a screenshot), or checked again just before writing.
pub fn check(path: &Path, flag: &str, inputs: &[Input], force: bool) -> Result<(), String> {
    let shown = path.display();
    let text = path.as_os_str().to_string_lossy();
    let names_a_folder = text.is_empty()
        || path.file_name().is_none()
        || text.ends_with('/')
        || text.ends_with(std::path::MAIN_SEPARATOR);
    if names_a_folder || path.is_dir() {
        return Err(format!(
            "{shown} is a folder; give {flag} a file name, e.g. {}",
            path.join("tinygpt.safetensors").display()
        ));
    }
    // Through symlinks: what a write would reach.
    let Ok(meta) = std::fs::metadata(path) else {
        // A new name (or a dangling link, which the rename replaces).
        return Ok(());
    };
    if !meta.is_file() {
        return Err(format!(
            "{shown} is not a regular file ({}); tinygpt never writes over one: give {flag} the name of a new file",
            kind(&meta)
        ));
    }
    for input in inputs {
        if same_file(path, input.path) {
            return Err(format!(
                "{flag} {shown} is the same file as {} {}, which this command reads; write to another name",
                input.flag,
                input.path.display()
            ));
        }
    }
    if !force {
        return Err(format!(
            "{shown} already exists and this run did not write it; give {flag} a new name, or add --force to replace it"
        ));
    }
    Ok(())
}

/// Why a save the app makes did not pass [`check`].
#[derive(Debug)]
pub enum SaveRefusal {
    /// A regular file is there that this app did not write: the user may
    /// say to replace it.
    Ask,
    /// Anything no answer changes (a folder, a special file, …).
    Refused(String),
}

/// [`check`] for a save the app makes (no inputs): an existing regular file
/// asks the user first, unless `replace`.
pub fn check_save(path: &Path, flag: &str, replace: bool) -> Result<(), SaveRefusal> {
    check(path, flag, &[], replace).map_err(|e| {
        if !replace && path.is_file() {
            SaveRefusal::Ask
        } else {
            SaveRefusal::Refused(e)
        }
    })
}

/// Whether `a` and `b` are one file (device and inode, through symlinks).
pub fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, renamed over
/// it; refuses a target that is not a regular file (checked again here, for
/// whatever appeared there since the command started).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    refuse_special(path)?;
    let tmp = temp_path(path);
    let result = (|| {
        let mut out = std::fs::File::create(&tmp)?;
        out.write_all(bytes)?;
        out.sync_all()?;
        drop(out);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// An error unless `path` is missing or a regular file: a rename would
/// replace a device node or a pipe with a file (as root, `/dev/full`).
pub fn refuse_special(path: &Path) -> std::io::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err(std::io::Error::other(format!(
            "it is not a regular file ({}); tinygpt never writes over one",
            kind(&meta)
        ))),
        _ => Ok(()),
    }
}

/// The temporary file a write goes through before it is renamed to `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// The lock file of an output: `NAME.lock` beside it.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".lock");
    path.with_file_name(name)
}

/// Whether a process with this pid runs (on other systems: assumed so).
pub fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = i32::try_from(pid) else {
            return false;
        };
        // SAFETY: kill(pid, 0) sends nothing; it only asks whether pid exists.
        // EPERM: it runs, as another user.
        let answered = unsafe { libc::kill(pid, 0) } == 0;
        answered || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Whether a run that still runs (this one included) holds `path`'s lock;
/// a lock left by a process that is gone does not count.
fn locked(path: &Path) -> bool {
    match std::fs::read_to_string(lock_path(path)) {
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map_or(true, |pid| pid == std::process::id() || process_alive(pid)),
        Err(_) => exists(&lock_path(path)),
    }
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn shown_dir(dir: &Path) -> String {
    if dir.as_os_str().is_empty() {
        ".".into()
    } else {
        dir.display().to_string()
    }
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_fifo() {
            return "a pipe";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

/// Creates `NAME.lock` with this process's pid, or says who holds it; a
/// lock left by a process that no longer runs is taken over. Creating it
/// also tells whether the folder can be written at all.
fn take_lock(path: &Path, flag: &str) -> Result<PathBuf, String> {
    use std::io::Write;
    let lock = lock_path(path);
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut file) => {
                return file
                    .write_all(format!("{}\n", std::process::id()).as_bytes())
                    .map(|()| lock.clone())
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&lock);
                        format!("{}: {e}; choose a writable path with {flag}", path.display())
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(&lock)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok());
                match holder {
                    Some(pid) if pid == std::process::id() => {
                        return Err(format!(
                            "{} is given twice to this command; give each output its own name",
                            path.display()
                        ));
                    }
                    Some(pid) if process_alive(pid) => {
                        return Err(format!(
                            "another tinygpt (pid {pid}) is writing {}; wait for it to finish, or give {flag} another name",
                            path.display()
                        ));
                    }
                    Some(_) => {
                        // Stale: its process is gone.
                        let _ = std::fs::remove_file(&lock);
                    }
                    None => {
                        return Err(format!(
                            "{} exists and is not a tinygpt lock (no pid in it); remove it, or give {flag} another name",
                            lock.display()
                        ));
                    }
                }
            }
            Err(e) => {
                return Err(format!(
                    "{}: {e}; choose a writable path with {flag}",
                    path.display()
                ));
            }
        }
    }
    Err(format!(
        "cannot take the lock {} (it keeps coming back); give {flag} another name",
        lock.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tinygpt-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_input_existing_file_or_folder_is_refused_and_a_new_name_is_claimed() {
        let dir = scratch("rule");
        let corpus = dir.join("corpus.txt");
        std::fs::write(&corpus, b"text").unwrap();
        let inputs = [Input::new("--corpus", &corpus)];
        let e = claim(&corpus, "--out", &inputs, true).unwrap_err();
        assert!(e.contains("same file as --corpus"), "{e}");
        let e = claim(&corpus, "--out", &[], false).unwrap_err();
        assert!(e.contains("already exists") && e.contains("--force"), "{e}");
        assert!(claim(&dir, "--out", &[], true).unwrap_err().contains("folder"));
        #[cfg(unix)]
        {
            let link = dir.join("link.txt");
            std::os::unix::fs::symlink(&corpus, &link).unwrap();
            let e = claim(&link, "--out", &inputs, true).unwrap_err();
            assert!(e.contains("same file"), "{e}");
            let e = claim(Path::new("/dev/null"), "--out", &[], true).unwrap_err();
            assert!(e.contains("not a regular file (a device)"), "{e}");
        }
        assert_eq!(std::fs::read(&corpus).unwrap(), b"text");
        let new = dir.join("new.safetensors");
        let mut c = claim(&new, "--out", &inputs, false).unwrap();
        assert!(lock_path(&new).exists());
        // A second claim while the first holds the lock: refused (the pid
        // is ours here, so fake another live one: pid 1 always runs).
        std::fs::write(lock_path(&new), "1\n").unwrap();
        let e = claim(&new, "--out", &[], false).unwrap_err();
        assert!(e.contains("another tinygpt (pid 1)"), "{e}");
        std::fs::write(lock_path(&new), format!("{}\n", std::process::id())).unwrap();
        c.release();
        assert!(!lock_path(&new).exists());
    }

    #[test]
    fn taken_default_names_get_a_number() {
        let dir = scratch("numbered");
        let first = numbered(&dir, "tinygpt-small", "safetensors", "--out").unwrap();
        assert_eq!(first.path(), dir.join("tinygpt-small.safetensors"));
        // Locked but not yet written: the next number.
        let second = numbered(&dir, "tinygpt-small", "safetensors", "--out").unwrap();
        assert_eq!(second.path(), dir.join("tinygpt-small-2.safetensors"));
        drop((first, second));
        // A lock whose process is gone does not take the name.
        let stale = dir.join("tinygpt-small.safetensors.lock");
        std::fs::write(&stale, format!("{}\n", u32::MAX - 1)).unwrap();
        let again = numbered(&dir, "tinygpt-small", "safetensors", "--out").unwrap();
        assert_eq!(again.path(), dir.join("tinygpt-small.safetensors"));
        drop(again);
        std::fs::write(dir.join("tinygpt-small.safetensors"), b"x").unwrap();
        let third = numbered(&dir, "tinygpt-small", "safetensors", "--out").unwrap();
        assert_eq!(third.path(), dir.join("tinygpt-small-2.safetensors"));
    }

    #[test]
    fn write_atomic_refuses_a_special_file() {
        #[cfg(unix)]
        {
            let e = write_atomic(Path::new("/dev/null"), b"x").unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        let dir = scratch("atomic");
        let path = dir.join("a.txt");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
    }
}
