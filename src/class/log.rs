//! The class's file: an append-only log, one JSON [`Record`] per line after
//! a header line of our own ([`HEADER`]). A batch of records is written and
//! synced to disk before the answers in it are acknowledged, so a server
//! killed at any moment and started again on the same file has every
//! answer a student saw accepted. A line cut short by the kill is dropped
//! (it was never acknowledged) and the file cut back to the last whole one.
//!
//! The file is never one the user had: a new log is created exclusively
//! (never over an existing file, never through a symlink); an existing one
//! is resumed only if it is a regular file that begins with our header.
//! Ending the class deletes it (the nicknames in it go with it), and only
//! if it is still the file we opened.

use super::session::Record;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The first line of every class log.
pub const HEADER: &str = "tinygpt-class v1";

#[derive(Debug)]
pub struct SessionLog {
    file: File,
    path: PathBuf,
}

/// Whether `path` holds a class log of ours (a regular file, not a link,
/// beginning with [`HEADER`]).
pub fn is_class_log(path: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !meta.file_type().is_file() {
        return false;
    }
    let mut start = [0u8; HEADER.len() + 1];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut start))
        .is_ok_and(|_| start[..HEADER.len()] == *HEADER.as_bytes() && start[HEADER.len()] == b'\n')
}

impl SessionLog {
    /// A new log holding the record that opens the class; refused where
    /// any file (or link) is already at `path`.
    pub fn create(path: &Path, opened: &Record) -> Result<SessionLog, String> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            // The nicknames are the students': only the teacher reads them.
            options.mode(0o600);
        }
        let file = options.open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                format!(
                    "{} exists and is not a class of ours: pass --session with a new file name",
                    path.display()
                )
            } else {
                format!("cannot create the class file {}: {e}", path.display())
            }
        })?;
        let mut log = SessionLog {
            file,
            path: path.to_path_buf(),
        };
        log.file
            .write_all(format!("{HEADER}\n").as_bytes())
            .and_then(|_| log.append(std::slice::from_ref(opened)))
            .map_err(|e| format!("cannot write the class file {}: {e}", path.display()))?;
        Ok(log)
    }

    /// An existing log and its records, to resume the class.
    pub fn resume(path: &Path) -> Result<(SessionLog, Vec<Record>), String> {
        if !is_class_log(path) {
            return Err(format!(
                "{} is not a class file of tinygpt's (it does not begin with `{HEADER}`): pass --session with a new file name",
                path.display()
            ));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open the class file {}: {e}", path.display()))?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| format!("cannot read the class file {}: {e}", path.display()))?;
        // A last line without its newline was cut short by a kill: never
        // acknowledged, so dropped, and the file cut back to the whole lines.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        if whole < text.len() {
            file.set_len(whole as u64)
                .and_then(|_| file.seek(SeekFrom::End(0)).map(|_| ()))
                .map_err(|e| format!("cannot repair the class file {}: {e}", path.display()))?;
        }
        let records = parse(&text[..whole], path)?;
        Ok((
            SessionLog {
                file,
                path: path.to_path_buf(),
            },
            records,
        ))
    }

    /// A log's records as they are on disk now (its whole lines), read
    /// without opening it for writing: what a restart would resume.
    pub fn records(path: &Path) -> Result<Vec<Record>, String> {
        if !is_class_log(path) {
            return Err(format!("{} is not a class file of tinygpt's", path.display()));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the class file {}: {e}", path.display()))?;
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        parse(&text[..whole], path)
    }

    /// Appends records and waits until they are on disk.
    pub fn append(&mut self, records: &[Record]) -> std::io::Result<()> {
        let mut text = String::new();
        for r in records {
            text.push_str(&serde_json::to_string(r).expect("a record serialises"));
            text.push('\n');
        }
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Deletes the log, if the file at its path is still this one.
    pub fn remove(self) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ours = self.file.metadata()?;
            let there = std::fs::symlink_metadata(&self.path)?;
            if ours.dev() != there.dev() || ours.ino() != there.ino() {
                return Err(std::io::Error::other(format!(
                    "{} is no longer the class's file; left as it is",
                    self.path.display()
                )));
            }
        }
        #[cfg(not(unix))]
        if !is_class_log(&self.path) {
            return Err(std::io::Error::other("not the class's file"));
        }
        std::fs::remove_file(&self.path)
    }
}

/// The records of a log's whole lines (after its header).
fn parse(text: &str, path: &Path) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let record: Record = serde_json::from_str(line).map_err(|e| {
            format!(
                "{} line {} is not a class record ({e}); start a new class with another --session",
                path.display(),
                i + 1
            )
        })?;
        records.push(record);
    }
    Ok(records)
}
