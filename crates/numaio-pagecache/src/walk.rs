//! Streaming expansion of command-line operands into regular files (vmtouch-style).
//!
//! Operands are taken one at a time (they may come from a pipe), directories are walked
//! with `walkdir` in directory order without collecting them, and the type each directory
//! entry reports is trusted, so a file met while walking costs no `stat` before it is
//! opened. Memory stays flat whatever the number of files: only hard-linked files
//! (`st_nlink > 1`) are remembered, to count each inode once.

use crate::error::PagecacheError;
use crate::file::OpenFile;
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How operands are expanded.
#[derive(Debug, Clone, Default)]
pub struct WalkOptions {
    /// Walk directories (`-r`); without it a directory operand is an error.
    pub recursive: bool,
    /// Follow symbolic links met while walking (`-f`); operands are always followed.
    pub follow_symlinks: bool,
    /// Do not descend into directories on other file systems (`-F`).
    pub one_file_system: bool,
    /// Only files whose name matches one of these (`-I`).
    pub include: Option<GlobSet>,
    /// Skip files and directories whose name matches one of these (`-i`).
    pub ignore: Option<GlobSet>,
}

/// Builds a glob set matched against file names (not whole paths), as vmtouch does.
pub fn glob_set(patterns: &[String]) -> Result<Option<GlobSet>, PagecacheError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let g = Glob::new(p).map_err(|e| PagecacheError::InvalidPattern {
            pattern: p.clone(),
            reason: e.kind().to_string(),
        })?;
        b.add(g);
    }
    b.build()
        .map(Some)
        .map_err(|e| PagecacheError::InvalidPattern {
            pattern: patterns.join(" "),
            reason: e.kind().to_string(),
        })
}

/// A file to work on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkEntry {
    pub path: PathBuf,
    /// Found while walking, with a directory-entry type of "regular file": it may be
    /// opened without a `stat` first.
    pub from_walk: bool,
    /// Open with `O_NOFOLLOW` (walked without `-f`: the entry was not a link).
    pub no_follow: bool,
}

/// Opens a file of a walk: one that the directory listing reported as a regular file is
/// opened without a `stat` first (the type is checked again on the descriptor), and with
/// `O_NOFOLLOW` when the walk does not follow links. Operands get [`crate::open_regular`].
pub fn open_entry(e: &WalkEntry) -> Result<OpenFile, PagecacheError> {
    crate::file::open_checked(&e.path, !e.from_walk, e.no_follow)
}

/// Expands operands into [`WalkEntry`]s, lazily. Errors name their path; the walk goes on.
pub struct Walker<I: Iterator<Item = PathBuf>> {
    operands: I,
    opts: WalkOptions,
    dir: Option<walkdir::IntoIter>,
}

/// Starts a walk over `operands`.
pub fn walk<I: IntoIterator<Item = PathBuf>>(
    operands: I,
    opts: WalkOptions,
) -> Walker<I::IntoIter> {
    Walker {
        operands: operands.into_iter(),
        opts,
        dir: None,
    }
}

fn name_matches(set: &Option<GlobSet>, name: &OsStr) -> bool {
    set.as_ref().is_some_and(|s| s.is_match(Path::new(name)))
}

impl<I: Iterator<Item = PathBuf>> Walker<I> {
    /// Whether a file named `name` passes `-I`/`-i`.
    fn wanted_file(&self, name: Option<&OsStr>) -> bool {
        let Some(name) = name else { return true };
        if name_matches(&self.opts.ignore, name) {
            return false;
        }
        self.opts.include.is_none() || name_matches(&self.opts.include, name)
    }

    fn next_in_dir(&mut self) -> Option<Result<WalkEntry, PagecacheError>> {
        loop {
            let it = self.dir.as_mut()?;
            let e = match it.next() {
                None => {
                    self.dir = None;
                    return None;
                }
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    // A symlink loop while following: already visited, nothing new there.
                    if e.loop_ancestor().is_some() {
                        continue;
                    }
                    let depth = e.depth();
                    let path = e.path().map(Path::to_path_buf).unwrap_or_default();
                    let io = e.into_io_error();
                    // Gone since the directory was read, or a dangling link while
                    // following: nothing to report on.
                    if depth > 0
                        && io
                            .as_ref()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
                    {
                        continue;
                    }
                    let io = io.unwrap_or_else(|| std::io::Error::other("directory walk failed"));
                    return Some(Err(PagecacheError::io(&path, "list directory", io)));
                }
            };
            let ft = e.file_type();
            if e.depth() > 0 && name_matches(&self.opts.ignore, e.file_name()) {
                if ft.is_dir() {
                    it.skip_current_dir();
                }
                continue;
            }
            if !ft.is_file() {
                // Directories are descended into; links (not followed), FIFOs, sockets and
                // devices hold no page cache of their own and are skipped.
                continue;
            }
            if !self.wanted_file(Some(e.file_name())) {
                continue;
            }
            let no_follow = !self.opts.follow_symlinks;
            return Some(Ok(WalkEntry {
                path: e.into_path(),
                from_walk: true,
                no_follow,
            }));
        }
    }
}

impl<I: Iterator<Item = PathBuf>> Iterator for Walker<I> {
    type Item = Result<WalkEntry, PagecacheError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.next_in_dir() {
                return Some(r);
            }
            let p = self.operands.next()?;
            if self.opts.recursive {
                // Only a directory needs the stat here; a file operand is checked when it
                // is opened.
                match std::fs::metadata(&p) {
                    Ok(m) if m.is_dir() => {
                        self.dir = Some(
                            walkdir::WalkDir::new(&p)
                                .follow_links(self.opts.follow_symlinks)
                                .same_file_system(self.opts.one_file_system)
                                .into_iter(),
                        );
                        continue;
                    }
                    Err(e) => return Some(Err(PagecacheError::io(&p, "stat", e))),
                    Ok(_) => {}
                }
            }
            if !self.wanted_file(p.file_name()) {
                continue;
            }
            return Some(Ok(WalkEntry {
                path: p,
                from_walk: false,
                no_follow: false,
            }));
        }
    }
}

/// Why an opened file is not worked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Larger than `-m`.
    TooLarge,
    /// Another name of a file already seen (hard link).
    SeenLink,
}

/// Per-file checks that need the file's metadata: the size limit and hard links.
#[derive(Debug, Default)]
pub struct FileFilter {
    /// Skip files larger than this (`-m`).
    pub max_size: Option<u64>,
    /// Inodes with more than one link seen so far.
    links: HashSet<(u64, u64)>,
}

impl FileFilter {
    pub fn new(max_size: Option<u64>) -> FileFilter {
        FileFilter {
            max_size,
            links: HashSet::new(),
        }
    }

    /// `Ok` to work on `f`, or why not. Records `f` if it has several links.
    pub fn check(&mut self, f: &OpenFile) -> Result<(), Skip> {
        if self.max_size.is_some_and(|m| f.size > m) {
            return Err(Skip::TooLarge);
        }
        if f.meta.nlink() > 1 && !self.links.insert((f.meta.dev(), f.meta.ino())) {
            return Err(Skip::SeenLink);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(
        w: impl Iterator<Item = Result<WalkEntry, PagecacheError>>,
        root: &Path,
    ) -> Vec<String> {
        let mut v: Vec<String> = w
            .map(|e| {
                e.unwrap()
                    .path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn walks_filters_and_skips_links() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("sub/deep")).unwrap();
        std::fs::create_dir_all(r.join("skipdir")).unwrap();
        for f in [
            "a.bin",
            "b.txt",
            "sub/c.bin",
            "sub/deep/d.bin",
            "skipdir/e.bin",
        ] {
            std::fs::write(r.join(f), b"x").unwrap();
        }
        std::os::unix::fs::symlink(r.join("sub"), r.join("link")).unwrap();
        let opts = WalkOptions {
            recursive: true,
            ..Default::default()
        };
        let all = names(walk([r.to_path_buf()], opts.clone()), r);
        assert_eq!(
            all,
            [
                "a.bin",
                "b.txt",
                "skipdir/e.bin",
                "sub/c.bin",
                "sub/deep/d.bin"
            ]
        );
        let filtered = WalkOptions {
            include: glob_set(&["*.bin".into()]).unwrap(),
            ignore: glob_set(&["skipdir".into(), "d.*".into()]).unwrap(),
            ..opts.clone()
        };
        assert_eq!(
            names(walk([r.to_path_buf()], filtered), r),
            ["a.bin", "sub/c.bin"]
        );
        let follow = WalkOptions {
            follow_symlinks: true,
            ..opts
        };
        let v = names(walk([r.to_path_buf()], follow), r);
        assert!(v.contains(&"link/c.bin".to_string()), "{v:?}");
        // Without -r a directory operand comes back as an entry, refused when opened.
        let e: Vec<_> = walk([r.to_path_buf()], WalkOptions::default()).collect();
        assert_eq!(e.len(), 1);
        assert!(!e[0].as_ref().unwrap().from_walk);
        assert!(glob_set(&["a[".into()]).is_err());
    }

    #[test]
    fn hard_links_count_once_and_size_limit() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(&a, vec![0u8; 10000]).unwrap();
        std::fs::hard_link(&a, d.path().join("b")).unwrap();
        let mut f = FileFilter::new(None);
        let oa = crate::open_regular(&a).unwrap();
        let ob = crate::open_regular(&d.path().join("b")).unwrap();
        assert_eq!(f.check(&oa), Ok(()));
        assert_eq!(f.check(&ob), Err(Skip::SeenLink));
        let mut small = FileFilter::new(Some(4096));
        assert_eq!(small.check(&oa), Err(Skip::TooLarge));
    }
}
