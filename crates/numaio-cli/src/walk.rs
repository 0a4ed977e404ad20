//! What the page-cache commands (`where`, `warm`, `move`, `evict`, `lock`) share: the
//! vmtouch-style file selection flags, a streaming walk over them, buffered output and
//! streamed JSON documents, and the exit status for a partial result.

use crate::output::quote;
use crate::warnln;
use numaio_pagecache::{
    glob_set, open_entry, walk, FileFilter, OpenFile, PagecacheError, Skip, WalkOptions,
};
use serde::Serialize;
use std::cell::Cell;
use std::io::{BufRead, IsTerminal};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Version of the JSON documents of the page-cache commands (docs/pagecache.md). Raised
/// when a field changes meaning or goes away; new fields may appear without a bump.
pub const SCHEMA_VERSION: u32 = 1;

/// File selection, shared by the page-cache commands.
#[derive(clap::Args, Debug, Clone)]
pub struct WalkArgs {
    /// Files to work on (directories with -r).
    #[arg(value_name = "PATH", required_unless_present = "batch")]
    pub paths: Vec<PathBuf>,
    /// Walk directories recursively.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Follow symbolic links met while walking (command-line paths are always followed).
    #[arg(short = 'f', long = "follow-symlinks")]
    pub follow_symlinks: bool,
    /// Do not descend into directories on other file systems.
    #[arg(short = 'F', long)]
    pub one_file_system: bool,
    /// Skip files larger than SIZE (e.g. 500M; vmtouch's default limit, none here).
    #[arg(short = 'm', long, value_name = "SIZE", value_parser = crate::args::size)]
    pub max_file_size: Option<u64>,
    /// Skip files and directories whose name matches this glob (repeatable), like vmtouch -i.
    #[arg(short = 'i', long = "ignore", value_name = "GLOB")]
    pub ignore: Vec<String>,
    /// Only files whose name matches this glob (repeatable), like vmtouch -I.
    #[arg(short = 'I', long = "include", value_name = "GLOB")]
    pub include: Vec<String>,
    /// The --batch list is separated by NUL bytes, not newlines (find -print0).
    #[arg(short = '0', long = "null", requires = "batch")]
    pub null: bool,
}

/// The `--batch` list and `--range` of the commands that act on the pages of files
/// (`where` spells its own: its `-b` means bytes).
#[derive(clap::Args)]
pub struct Selection {
    /// Read more paths from FILE, one per line (- for stdin; -0 for NUL-separated), like vmtouch -b.
    #[arg(short = 'b', long, value_name = "FILE")]
    pub batch: Option<PathBuf>,
    /// Only this byte range of each file: OFF:LEN with K/M/G suffixes; OFF: means to the end (vmtouch -p).
    #[arg(long, value_name = "OFF:LEN", value_parser = crate::args::parse_range)]
    pub range: Option<(u64, u64)>,
}

/// The regular files a [`WalkArgs`] selects, opened one at a time.
pub struct Files {
    walker: numaio_pagecache::Walker<Box<dyn Iterator<Item = PathBuf>>>,
    filter: FileFilter,
    /// Set when the --batch list could not be read to the end.
    pub batch_failed: Rc<Cell<bool>>,
}

impl WalkArgs {
    /// Starts the walk: command-line paths first, then the `batch` list (`-` is stdin).
    pub fn files(&self, batch: Option<&Path>) -> anyhow::Result<Files> {
        let usage = |e: PagecacheError| crate::args::UsageError(e.to_string());
        let opts = WalkOptions {
            recursive: self.recursive,
            follow_symlinks: self.follow_symlinks,
            one_file_system: self.one_file_system,
            include: glob_set(&self.include).map_err(usage)?,
            ignore: glob_set(&self.ignore).map_err(usage)?,
        };
        let failed = Rc::new(Cell::new(false));
        let mut operands: Box<dyn Iterator<Item = PathBuf>> =
            Box::new(self.paths.clone().into_iter());
        if let Some(b) = batch {
            let reader: Box<dyn BufRead> = if b == Path::new("-") {
                Box::new(std::io::stdin().lock())
            } else {
                let f = std::fs::File::open(b).map_err(|e| {
                    anyhow::anyhow!("{}: cannot open the --batch list: {e}", quote(b))
                })?;
                Box::new(std::io::BufReader::new(f))
            };
            operands = Box::new(operands.chain(BatchList {
                reader,
                sep: if self.null { 0 } else { b'\n' },
                name: b.to_path_buf(),
                failed: failed.clone(),
            }));
        }
        Ok(Files {
            walker: walk(operands, opts),
            filter: FileFilter::new(self.max_file_size),
            batch_failed: failed,
        })
    }
}

impl Iterator for Files {
    type Item = Result<OpenFile, PagecacheError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let e = match self.walker.next()? {
                Ok(e) => e,
                Err(e) => return Some(Err(e)),
            };
            let f = match open_entry(&e) {
                Ok(f) => f,
                // A link met while walking without -f (O_NOFOLLOW): not ours to follow.
                Err(PagecacheError::Io { source, .. })
                    if e.from_walk && source.raw_os_error() == Some(libc::ELOOP) =>
                {
                    continue
                }
                Err(err) => return Some(Err(err)),
            };
            match self.filter.check(&f) {
                Ok(()) => return Some(Ok(f)),
                Err(Skip::TooLarge) => {
                    warnln!(
                        "{}: skipped, larger than --max-file-size ({} bytes)",
                        quote(&f.path),
                        f.size
                    );
                }
                // Another name of a file already done: vmtouch counts it once, silently.
                Err(Skip::SeenLink) => {}
            }
        }
    }
}

/// Paths read from a --batch list, one per line (or NUL-terminated), lazily.
struct BatchList {
    reader: Box<dyn BufRead>,
    sep: u8,
    name: PathBuf,
    failed: Rc<Cell<bool>>,
}

impl Iterator for BatchList {
    type Item = PathBuf;

    fn next(&mut self) -> Option<PathBuf> {
        loop {
            let mut buf = Vec::new();
            match self.reader.read_until(self.sep, &mut buf) {
                Ok(0) => return None,
                Ok(_) => {
                    if buf.last() == Some(&self.sep) {
                        buf.pop();
                    }
                    if buf.is_empty() {
                        continue;
                    }
                    return Some(PathBuf::from(std::ffi::OsString::from_vec(buf)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warnln!("{}: cannot read the --batch list: {e}", quote(&self.name));
                    self.failed.set(true);
                    return None;
                }
            }
        }
    }
}

/// Buffered standard output: one `write` per 32 KiB rather than per line, except that the
/// first 4 KiB go out line by line (the first results show at once, even when the walk is
/// long or the list comes slowly from a pipe) and a terminal gets every line as it comes.
pub struct Out {
    buf: String,
    tty: bool,
    written: usize,
}

/// Bytes written line by line before [`Out`] starts buffering.
const OUT_EAGER: usize = 4 << 10;

const OUT_BUF: usize = 32 << 10;

impl Out {
    pub fn new() -> Out {
        Out {
            buf: String::with_capacity(OUT_BUF + 4096),
            tty: std::io::stdout().is_terminal(),
            written: 0,
        }
    }

    /// Appends text; writes when due.
    pub fn push(&mut self, s: &str) -> anyhow::Result<()> {
        self.buf.push_str(s);
        if self.tty || self.written < OUT_EAGER || self.buf.len() >= OUT_BUF {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> anyhow::Result<()> {
        if !self.buf.is_empty() {
            crate::out!("{}", self.buf)?;
            self.written += self.buf.len();
            self.buf.clear();
        }
        Ok(())
    }
}

/// Ends a command that works file by file: closes the JSON document (or flushes the text)
/// and picks the exit code: failure if any file failed, `PARTIAL` if every file was handled
/// but some did not reach the goal.
pub fn finish<T: Serialize>(
    mut out: Out,
    doc: Option<JsonDoc>,
    rest: &T,
    failed: bool,
    complete: bool,
) -> anyhow::Result<std::process::ExitCode> {
    match doc {
        Some(d) => d.end(&mut out, rest)?,
        None => out.flush()?,
    }
    Ok(if failed {
        std::process::ExitCode::FAILURE
    } else if complete {
        std::process::ExitCode::SUCCESS
    } else {
        crate::exit::code(crate::exit::PARTIAL)
    })
}

/// A JSON document streamed file by file: `{"schema_version":1,"files":[...],...}` on one
/// line, so that memory does not grow with the number of files.
pub struct JsonDoc {
    first: bool,
}

impl JsonDoc {
    pub fn begin(out: &mut Out) -> anyhow::Result<JsonDoc> {
        out.push(&format!(
            "{{\"schema_version\":{SCHEMA_VERSION},\"files\":["
        ))?;
        Ok(JsonDoc { first: true })
    }

    pub fn file<T: Serialize>(&mut self, out: &mut Out, v: &T) -> anyhow::Result<()> {
        let s = serde_json::to_string(v)?;
        if !self.first {
            out.push(",")?;
        }
        self.first = false;
        out.push(&s)
    }

    /// Closes the files array and adds the document's other members (a JSON object).
    pub fn end<T: Serialize>(self, out: &mut Out, rest: &T) -> anyhow::Result<()> {
        let s = serde_json::to_string(rest)?;
        let inner = s
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or("");
        out.push("]")?;
        if !inner.is_empty() {
            out.push(",")?;
            out.push(inner)?;
        }
        out.push("}\n")?;
        out.flush()
    }
}
