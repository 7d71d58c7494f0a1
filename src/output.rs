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
//!   (`NAME.lock`) is taken for the whole run and removed when it ends.
//!
//! Nothing beside an output is trusted (issue 56):
//! - A lock is created exclusively (`O_EXCL`, never through a symlink) and
//!   holds our own format ([`lock_text`]: `tinygpt-lock v1`, the pid, the
//!   process's start time and the machine's boot id). Only a lock of that
//!   format whose process is gone (no such pid, another start time: the pid
//!   was reused, or another boot id) is stale and taken over; anything else
//!   at the lock's name (a file of the user's, one holding only a number, a
//!   symlink, a pipe) blocks the output with one line saying which file it
//!   is, and is never opened as a pipe, followed or removed.
//! - Temporary files ([`temp_file`]) are created exclusively under an
//!   unpredictable name of our own format, `NAME.tmp-PID-START-XXXXXX`; the
//!   clean-up after killed saves ([`remove_stale_temp_files`]) removes only
//!   files of that format that it can tell a save of ours left (a regular
//!   file, ours, one link, empty or a safetensors header, its process gone)
//!   and never an input of the command.
//! - A name too long for a lock or a temporary name beside it (a legal
//!   251-byte file name) gets those under a shortened name, the start of
//!   the name and a hash of all of it ([`lock_path`]).
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
    /// The lock file and the text this run wrote in it.
    lock: Option<(PathBuf, String)>,
}

impl Claim {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the lock now (before `std::process::exit`, which runs no
    /// destructors).
    pub fn release(&mut self) {
        // Only the lock this run wrote: whatever replaced it is not ours.
        if let Some((lock, text)) = self.lock.take()
            && let LockFile::Regular(bytes) = read_lock(&lock)
            && bytes == text.as_bytes()
        {
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
    remember_inputs(inputs);
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
    // `FILE/.` and `FILE/..` name a folder too (Path's file name skips the
    // trailing `.`), one that is not there.
    let last = text
        .rsplit(['/', std::path::MAIN_SEPARATOR])
        .next()
        .unwrap_or("");
    if last == "." || last == ".." {
        return Err(format!(
            "{shown} ends in `{last}`, which names a folder, not a file; give {flag} a file name, e.g. tinygpt.safetensors"
        ));
    }
    // Through symlinks: what a write would reach.
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(format!(
                "{shown} cannot be made: a part of it before the file name is a file, not a folder; \
                 give {flag} a name in an existing folder"
            ));
        }
        // A new name (or a dangling link, which the rename replaces).
        Err(_) => return Ok(()),
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

/// [`check`] for a save the app makes: an input of the app (what
/// [`note_inputs`] was told it opened) is refused whatever the answer; any
/// other existing regular file asks the user first, unless `replace`.
pub fn check_save(path: &Path, flag: &str, replace: bool) -> Result<(), SaveRefusal> {
    let known = INPUTS.lock().map(|k| k.clone()).unwrap_or_default();
    if let Some((input_flag, input)) = known.iter().find(|(_, p)| same_file(path, p)) {
        return Err(SaveRefusal::Refused(format!(
            "{flag} {} is the same file as {input_flag} {}, which this app opened; save under another name",
            path.display(),
            input.display()
        )));
    }
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

/// Writes `bytes` to `path` through a temporary file beside it ([`temp_file`]),
/// renamed over it; refuses a target that is not a regular file (checked
/// again here, for whatever appeared there since the command started).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    refuse_special(path)?;
    // Removed when dropped, on any error below.
    let mut tmp = temp_file(path)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    refuse_special(path)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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

/// The longest file name a file system takes (`NAME_MAX` on Linux, macOS
/// and Windows' NTFS): a lock or temporary name beside an output stays
/// within it.
pub const NAME_MAX: usize = 255;

/// The longest tail a temporary name adds to the output's name:
/// `.tmp-` (5), a pid (10), `-`, a start time (20), `-`, 6 random characters.
const TEMP_TAIL: usize = 5 + 10 + 1 + 20 + 1 + 6;

/// How many random characters end a temporary name.
const TEMP_RANDOM: usize = 6;

/// `name`, or where `name` and a `tail` of `tail` bytes would be longer
/// than [`NAME_MAX`], its start and `~` and a hash of all of it (16 hex
/// digits), short enough for the tail: the same for the same name, in
/// every process.
fn short_name(name: &std::ffi::OsStr, tail: usize) -> std::ffi::OsString {
    let bytes = name.as_encoded_bytes();
    if bytes.len() + tail <= NAME_MAX {
        return name.to_os_string();
    }
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let keep = NAME_MAX.saturating_sub(tail + 17);
    let text = name.to_string_lossy();
    let mut cut = keep.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}~{hash:016x}", &text[..cut]).into()
}

/// The folder `path` is in (`.` for a bare name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The start of every temporary name of `path`'s writes:
/// `NAME.tmp-` (NAME shortened where the whole would be too long).
fn temp_base(path: &Path) -> std::ffi::OsString {
    let mut base = short_name(path.file_name().unwrap_or_default(), TEMP_TAIL);
    base.push(".tmp-");
    base
}

/// A new temporary file beside `path`, for bytes that are then renamed over
/// it (`NamedTempFile::persist`): created exclusively (`O_EXCL`: never over
/// a file, a pipe or a symlink already there, never through one) under an
/// unpredictable name of our own format, `NAME.tmp-PID-START-XXXXXX` (this
/// process's pid and start time, six random letters and digits), with the
/// permissions `File::create` would give. Dropped, it is removed.
pub fn temp_file(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    if path.file_name().is_none() {
        return Err(std::io::Error::other("it names a folder, not a file"));
    }
    let (pid, start) = ours();
    let mut prefix = temp_base(path);
    prefix.push(format!("{pid}-{}-", start.unwrap_or(0)));
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).rand_bytes(TEMP_RANDOM);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    builder.tempfile_in(folder_of(path))
}

/// The pid and start time a temporary name of `path` holds, when `name` is
/// of our format exactly ([`temp_file`]); None for any other name.
fn our_temp_name(path: &Path, name: &std::ffi::OsStr) -> Option<(u32, u64)> {
    let name = name.to_str()?;
    let base = temp_base(path);
    let rest = name.strip_prefix(base.to_str()?)?;
    let mut parts = rest.split('-');
    let (pid, start, random) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some()
        || !digits(pid)
        || !digits(start)
        || random.len() != TEMP_RANDOM
        || !random.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return None;
    }
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Removes the temporary files that killed saves to `path` left, and only
/// those: a file is removed when its name is of our format exactly
/// ([`temp_file`]), it is a regular file (not a symlink, a pipe or a hard
/// link to another name) owned by this user, it holds nothing or the start
/// of a safetensors file, the process that made it is gone (no such pid,
/// or one that started at another time), and it is no input of this
/// command. Anything else is left where it is.
pub fn remove_stale_temp_files(path: &Path) {
    let Ok(entries) = std::fs::read_dir(folder_of(path)) else {
        return;
    };
    let (our_pid, our_start) = ours();
    for entry in entries.flatten() {
        let Some((pid, start)) = our_temp_name(path, &entry.file_name()) else {
            continue;
        };
        if pid == our_pid && Some(start) == our_start.or(Some(0)) {
            continue;
        }
        let file = entry.path();
        if process_gone(pid, (start != 0).then_some(start))
            && left_by_a_save(&file)
            && !is_input(&file)
        {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Whether `file` looks like what a killed save leaves: a regular file
/// with one link, owned by this user, empty or opening like a safetensors
/// file (8 bytes of header length, then `{`).
fn left_by_a_save(file: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(file) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid(2) only reads the process's user id.
        if meta.nlink() != 1 || meta.uid() != unsafe { libc::geteuid() } {
            return false;
        }
    }
    if meta.len() == 0 {
        return true;
    }
    let Ok(mut opened) = open_no_follow(file) else {
        return false;
    };
    let mut head = [0u8; 9];
    std::io::Read::read_exact(&mut opened, &mut head).is_ok() && head[8] == b'{'
}

/// The inputs of this command (flag, path), as [`check`] or [`note_inputs`]
/// was given them: never removed by a clean-up, whatever their names, and
/// never an app's save.
static INPUTS: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());

/// Tells the rule the files this command reads before any output is named
/// (the app: its --checkpoint, --corpus, …), so [`check_save`] refuses them.
pub fn note_inputs(inputs: &[Input]) {
    remember_inputs(inputs)
}

fn remember_inputs(inputs: &[Input]) {
    if let Ok(mut known) = INPUTS.lock() {
        for input in inputs {
            if !known.iter().any(|(_, k)| k == input.path) {
                known.push((input.flag.to_string(), input.path.to_path_buf()));
            }
        }
    }
}

fn is_input(file: &Path) -> bool {
    INPUTS
        .lock()
        .map_or(true, |known| known.iter().any(|(_, k)| same_file(k, file)))
}

/// The lock file of an output: `NAME.lock` beside it (NAME shortened, with
/// a hash of the whole, where `NAME.lock` would be longer than a file
/// system takes).
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = short_name(path.file_name().unwrap_or_default(), ".lock".len());
    name.push(".lock");
    path.with_file_name(name)
}

/// The first line of every lock tinygpt writes.
const LOCK_MAGIC: &str = "tinygpt-lock v1";

/// The text of the lock that process `pid` holds: `tinygpt-lock v1`, then
/// `pid N`, `start T` (its start time, field 22 of `/proc/PID/stat`, or `-`
/// where the system does not say) and `boot ID` (the machine's boot id, or
/// `-`), a line each. [`claim`] writes it for this process; a test plants
/// one for another.
pub fn lock_text(pid: u32) -> String {
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    format!(
        "{LOCK_MAGIC}\npid {pid}\nstart {}\nboot {}\n",
        dash(start_time(pid).map(|t| t.to_string())),
        dash(boot_id())
    )
}

/// Who wrote a lock of our format.
#[derive(Debug, PartialEq, Eq)]
struct LockOwner {
    pid: u32,
    start: Option<u64>,
    boot: Option<String>,
}

/// A lock's text read as our format; None for anything else (a number
/// alone, a file of the user's).
fn parse_lock(bytes: &[u8]) -> Option<LockOwner> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != LOCK_MAGIC {
        return None;
    }
    let mut field = |key: &str| -> Option<String> {
        let line = lines.next()?;
        line.strip_prefix(key)?
            .strip_prefix(' ')
            .map(str::to_string)
    };
    let pid = field("pid")?.parse().ok()?;
    let known = |v: String| (v != "-").then_some(v);
    let start = match known(field("start")?) {
        Some(t) => Some(t.parse().ok()?),
        None => None,
    };
    let boot = known(field("boot")?);
    Some(LockOwner { pid, start, boot })
}

/// What a lock of our format says now.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    /// This process (the same output given twice to one command).
    This,
    /// Another process that still runs.
    Running(u32),
    /// Its process is gone: no such pid, one that started at another time
    /// (the pid was reused), or the machine started again since.
    Gone,
}

fn holder(owner: &LockOwner) -> Holder {
    if let (Some(then), Some(now)) = (&owner.boot, boot_id())
        && *then != now
    {
        return Holder::Gone;
    }
    if process_gone(owner.pid, owner.start) {
        return Holder::Gone;
    }
    if owner.pid == std::process::id() {
        Holder::This
    } else {
        Holder::Running(owner.pid)
    }
}

/// What is at a lock's name, looked at without following a symlink and
/// without opening anything but a regular file.
#[derive(Debug)]
enum LockFile {
    Missing,
    /// A regular file, its first 4 KiB.
    Regular(Vec<u8>),
    /// A symlink, a folder, a pipe, a device or a socket: what it is.
    Special(&'static str),
    /// It could not be read.
    Unreadable(String),
}

fn read_lock(lock: &Path) -> LockFile {
    let meta = match std::fs::symlink_metadata(lock) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LockFile::Missing,
        Err(e) => return LockFile::Unreadable(e.to_string()),
    };
    if !meta.is_file() {
        return LockFile::Special(kind(&meta));
    }
    let mut bytes = Vec::new();
    match open_no_follow(lock).and_then(|file| {
        // Swapped for something else since: refused by type as well.
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other(kind(&meta)));
        }
        std::io::Read::read_to_end(&mut std::io::Read::take(file, 4096), &mut bytes)
    }) {
        Ok(_) => LockFile::Regular(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => LockFile::Missing,
        Err(e) => LockFile::Unreadable(e.to_string()),
    }
}

/// Opens a file to read it without following a symlink at its name and
/// without waiting on a pipe put there.
fn open_no_follow(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path)
}

/// This process's pid and start time.
fn ours() -> (u32, Option<u64>) {
    let pid = std::process::id();
    (pid, start_time(pid))
}

/// When process `pid` started (field 22 of `/proc/PID/stat`: clock ticks
/// since the machine started), where the system says (Linux).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow it: field 22 is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The machine's boot id (`/proc/sys/kernel/random/boot_id`), where the
/// system says (Linux).
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// Whether the process that wrote `pid` (and its start time, where known)
/// is gone: no such pid, or one that started at another time (the pid was
/// reused). The one test of both a lock's and a temporary file's owner.
fn process_gone(pid: u32, start: Option<u64>) -> bool {
    !process_alive(pid)
        || start
            .zip(start_time(pid))
            .is_some_and(|(then, now)| then != now)
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

/// Whether something holds `path`'s lock name: a run that still runs
/// (this one included), or anything that is not a lock of ours; only a
/// lock of ours whose process is gone does not count.
fn locked(path: &Path) -> bool {
    match read_lock(&lock_path(path)) {
        LockFile::Missing => false,
        LockFile::Regular(bytes) => parse_lock(&bytes).is_none_or(|o| holder(&o) != Holder::Gone),
        LockFile::Special(_) | LockFile::Unreadable(_) => true,
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
    if t.is_symlink() {
        return "a symbolic link";
    }
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

/// Creates `NAME.lock` ([`lock_path`]) holding [`lock_text`], or says what
/// holds it: another run, this one (the output named twice), or a file
/// that is not a lock of ours (never removed). A lock of ours whose
/// process is gone is taken over. Creating it also tells whether the
/// folder can be written at all. Returns the lock and its text.
fn take_lock(path: &Path, flag: &str) -> Result<(PathBuf, String), String> {
    use std::io::Write;
    let lock = lock_path(path);
    let text = lock_text(std::process::id());
    let shown = path.display();
    let blocked = |what: &str| {
        format!(
            "{} blocks writing {shown}: tinygpt locks {shown} with a file of that name, and this one is {what}, so it is left alone; move it away if nothing needs it, or give {flag} another name",
            lock.display()
        )
    };
    for _ in 0..3 {
        // O_EXCL: never over anything there, never through a symlink.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut file) => {
                return file
                    .write_all(text.as_bytes())
                    .map(|()| (lock.clone(), text.clone()))
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&lock);
                        format!("{shown}: {e}; choose a writable path with {flag}")
                    });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("{shown}: {e}; choose a writable path with {flag}")),
        }
        let bytes = match read_lock(&lock) {
            // Removed in the meantime: try again.
            LockFile::Missing => continue,
            LockFile::Regular(bytes) => bytes,
            LockFile::Special(what) => {
                return Err(blocked(&format!("{what}, not a tinygpt lock")));
            }
            LockFile::Unreadable(e) => {
                return Err(blocked(&format!("unreadable ({e})")));
            }
        };
        let Some(owner) = parse_lock(&bytes) else {
            return Err(blocked(
                "not a tinygpt lock (a file of yours, or a lock of an older tinygpt)",
            ));
        };
        match holder(&owner) {
            Holder::This => {
                return Err(format!(
                    "{shown} is given twice to this command; give each output its own name"
                ));
            }
            Holder::Running(pid) => {
                return Err(format!(
                    "another tinygpt (pid {pid}) is writing {shown}; wait for it to finish, or give {flag} another name"
                ));
            }
            Holder::Gone => {
                // Stale: ours, and its process is gone. Removed only while it
                // still holds what was read (not a lock another run has just
                // taken over).
                if let LockFile::Regular(now) = read_lock(&lock)
                    && now == bytes
                {
                    let _ = std::fs::remove_file(&lock);
                }
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
        let dir =
            std::env::temp_dir().join(format!("tinygpt-output-{name}-{}", std::process::id()));
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
        assert!(
            claim(&dir, "--out", &[], true)
                .unwrap_err()
                .contains("folder")
        );
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
        let ours = std::fs::read(lock_path(&new)).unwrap();
        // The same output twice in one command.
        let e = claim(&new, "--out", &[], false).unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        // A second claim while another run holds the lock: refused (the
        // pid is ours here, so fake another live one: pid 1 always runs).
        std::fs::write(lock_path(&new), lock_text(1)).unwrap();
        let e = claim(&new, "--out", &[], false).unwrap_err();
        assert!(e.contains("another tinygpt (pid 1)"), "{e}");
        std::fs::write(lock_path(&new), &ours).unwrap();
        c.release();
        assert!(!lock_path(&new).exists());
        // A lock that is not this run's any more is left by its release.
        let mut c = claim(&new, "--out", &[], false).unwrap();
        std::fs::write(lock_path(&new), lock_text(1)).unwrap();
        c.release();
        assert_eq!(
            std::fs::read_to_string(lock_path(&new)).unwrap(),
            lock_text(1)
        );
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
        // A lock of ours whose process is gone does not take the name.
        let stale = dir.join("tinygpt-small.safetensors.lock");
        std::fs::write(&stale, lock_text(u32::MAX - 1)).unwrap();
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

    /// Issue 56: a lock is ours only in our format, stale only when its
    /// process is provably gone (a reused pid included); anything else at
    /// its name blocks the output and is left alone.
    #[test]
    fn only_a_lock_of_ours_whose_process_is_gone_is_taken_over() {
        let dir = scratch("locks");
        let out = dir.join("run.safetensors");
        let lock = lock_path(&out);
        let text = lock_text(std::process::id());
        assert!(text.starts_with("tinygpt-lock v1\npid "), "{text}");
        let owner = parse_lock(text.as_bytes()).unwrap();
        assert_eq!(owner.pid, std::process::id());
        // This pid, another start time (a container that gives tinygpt the
        // same pid every start): stale, not "given twice".
        #[cfg(target_os = "linux")]
        {
            let start = start_time(std::process::id()).unwrap();
            let reused = text.replace(
                &format!("start {start}\n"),
                &format!("start {}\n", start + 1),
            );
            assert_ne!(reused, text);
            std::fs::write(&lock, &reused).unwrap();
            drop(claim(&out, "--out", &[], false).expect("a reused pid's lock is stale"));
            // pid 1 runs, but started at another time than the lock says.
            let one = lock_text(1);
            let start = start_time(1).unwrap();
            let other = one.replace(
                &format!("start {start}\n"),
                &format!("start {}\n", start + 7),
            );
            std::fs::write(&lock, other).unwrap();
            drop(claim(&out, "--out", &[], false).expect("pid 1's lock of another start is stale"));
            // Another boot: stale, whatever runs under that pid now.
            let boot = boot_id().unwrap();
            std::fs::write(&lock, one.replace(&boot, "another-boot")).unwrap();
            drop(claim(&out, "--out", &[], false).expect("a lock of another boot is stale"));
        }
        assert!(!lock.exists());
        // A user's file that holds a number, or anything else: never removed.
        for user in ["4000000\n", "my notes\n", ""] {
            std::fs::write(&lock, user).unwrap();
            let e = claim(&out, "--out", &[], false).unwrap_err();
            assert!(
                e.contains("run.safetensors.lock blocks writing")
                    && e.contains("not a tinygpt lock")
                    && e.contains("give --out another name"),
                "{e}"
            );
            assert_eq!(std::fs::read_to_string(&lock).unwrap(), user);
            // A default name goes on to the next number instead.
            let next = numbered(&dir, "run", "safetensors", "--out").unwrap();
            assert_eq!(next.path(), dir.join("run-2.safetensors"));
        }
        std::fs::remove_file(&lock).unwrap();
        #[cfg(unix)]
        {
            // A symlink at the lock's name: not followed, not removed.
            let target = dir.join("target.txt");
            std::fs::write(&target, "keep").unwrap();
            std::os::unix::fs::symlink(&target, &lock).unwrap();
            let e = claim(&out, "--out", &[], false).unwrap_err();
            assert!(e.contains("a symbolic link, not a tinygpt lock"), "{e}");
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
            std::fs::remove_file(&lock).unwrap();
            // A dangling one is not created through either.
            std::os::unix::fs::symlink(dir.join("nowhere"), &lock).unwrap();
            assert!(claim(&out, "--out", &[], false).is_err());
            assert!(!dir.join("nowhere").exists());
            std::fs::remove_file(&lock).unwrap();
            // A pipe: refused by type, never opened (opening it would wait
            // for a writer forever).
            let name = std::ffi::CString::new(lock.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: mkfifo(3) on a path the test owns.
            assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
            let e = claim(&out, "--out", &[], false).unwrap_err();
            assert!(e.contains("a pipe, not a tinygpt lock"), "{e}");
            assert!(!std::fs::symlink_metadata(&lock).unwrap().is_file());
            let next = numbered(&dir, "run", "safetensors", "--out").unwrap();
            assert_eq!(next.path(), dir.join("run-2.safetensors"));
        }
    }

    /// Issue 56: a legal 251-byte file name is claimed and written; its lock
    /// and temporary names beside it are shortened (the name's start and a
    /// hash), so they stay within 255 bytes and the lock still works.
    #[test]
    fn a_name_too_long_for_its_lock_gets_a_shortened_lock() {
        let dir = scratch("long");
        let name = format!("x{}.safetensors", "é".repeat(119));
        assert_eq!(name.len(), 251);
        let out = dir.join(&name);
        let lock = lock_path(&out);
        let lock_name = lock.file_name().unwrap().to_str().unwrap();
        assert!(
            lock_name.len() <= NAME_MAX && lock_name.ends_with(".lock"),
            "{lock_name}"
        );
        assert!(lock_name.starts_with("xéé"), "{lock_name}");
        // Another long name with the same start gets another lock.
        let other = dir.join(format!("x{}.safetensorz", "é".repeat(119)));
        assert_ne!(lock_path(&other), lock);
        let c = claim(&out, "--out", &[], false).unwrap();
        assert!(lock.exists());
        let e = claim(&out, "--out", &[], false).unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        write_atomic(&out, b"bytes").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"bytes");
        drop(c);
        assert!(!lock.exists());
        // A short name keeps its plain lock name.
        assert_eq!(lock_path(&dir.join("a.txt")), dir.join("a.txt.lock"));
    }

    /// Issue 56: the clean-up removes only a temporary file of our own
    /// format that a save of a process that is gone left, never a file of
    /// another name, a symlink, a hard link or an input of the command.
    #[cfg(unix)]
    #[test]
    fn the_clean_up_removes_only_what_a_killed_save_left() {
        let dir = scratch("cleanup");
        let out = dir.join("run.safetensors");
        let gone = 4_000_000u32;
        assert!(!process_alive(gone));
        let header = b"\x10\0\0\0\0\0\0\0{\"a\":1}";
        let stale = dir.join(format!("run.safetensors.tmp-{gone}-5-aB3dE9"));
        let empty = dir.join(format!("run.safetensors.tmp-{gone}-0-Zz0000"));
        std::fs::write(&stale, header).unwrap();
        std::fs::write(&empty, b"").unwrap();
        // Names of the old format or near ours, text, links: kept.
        let kept = [
            ("run.safetensors.tmp-4000000", &header[..]),
            ("run.safetensors.tmp-4000000-5-aB3dE", &header[..]),
            ("run.safetensors.tmp-4000000-5-aB3dE9-x", &header[..]),
            ("run.safetensors.tmp-4000000-5-aB3dE!", &header[..]),
            ("run.safetensors.tmp-4000000-5-textAA", b"First Citizen:\n"),
            ("other.safetensors.tmp-4000000-5-aB3dE9", &header[..]),
        ];
        for (name, bytes) in kept {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let target = dir.join("target.txt");
        std::fs::write(&target, header).unwrap();
        std::os::unix::fs::symlink(
            &target,
            dir.join(format!("run.safetensors.tmp-{gone}-5-link00")),
        )
        .unwrap();
        std::fs::hard_link(
            &target,
            dir.join(format!("run.safetensors.tmp-{gone}-5-hard00")),
        )
        .unwrap();
        // A file of our format that is an input of the command.
        let input = dir.join(format!("run.safetensors.tmp-{gone}-5-input0"));
        std::fs::write(&input, header).unwrap();
        check(&out, "--out", &[Input::new("--corpus", &input)], false).unwrap();
        // One of a process that runs (this one): kept.
        let (pid, start) = ours();
        let live = dir.join(format!(
            "run.safetensors.tmp-{pid}-{}-live00",
            start.unwrap_or(0)
        ));
        std::fs::write(&live, header).unwrap();
        remove_stale_temp_files(&out);
        assert!(!stale.exists() && !empty.exists());
        for (name, bytes) in kept {
            assert_eq!(std::fs::read(dir.join(name)).unwrap(), bytes, "{name}");
        }
        assert!(
            dir.join(format!("run.safetensors.tmp-{gone}-5-link00"))
                .exists()
        );
        assert!(
            dir.join(format!("run.safetensors.tmp-{gone}-5-hard00"))
                .exists()
        );
        assert_eq!(std::fs::read(&target).unwrap(), header);
        assert!(input.exists() && live.exists());
        // What temp_file makes is of that format.
        let made = temp_file(&out).unwrap();
        let made_name = made.path().file_name().unwrap().to_os_string();
        assert_eq!(
            our_temp_name(&out, &made_name),
            Some((pid, start.unwrap_or(0)))
        );
        drop(made);
        assert!(!dir.join(made_name).exists());
    }
}
