//! A minimal writer for the "newc" cpio format the kernel unpacks as an initramfs.

use std::collections::BTreeSet;

/// An archive being built in memory. Parent directories are added automatically.
pub struct Cpio {
    buf: Vec<u8>,
    next_ino: u32,
    dirs: BTreeSet<String>,
}

impl Default for Cpio {
    fn default() -> Self {
        Self::new()
    }
}

impl Cpio {
    pub fn new() -> Cpio {
        Cpio {
            buf: Vec::new(),
            next_ino: 1,
            dirs: BTreeSet::new(),
        }
    }

    fn header(&mut self, name: &str, mode: u32, uid: u32, gid: u32, size: usize) {
        self.header_dev(name, mode, uid, gid, size, (0, 0));
    }

    fn header_dev(
        &mut self,
        name: &str,
        mode: u32,
        uid: u32,
        gid: u32,
        size: usize,
        rdev: (u32, u32),
    ) {
        let ino = self.next_ino;
        self.next_ino += 1;
        let namesize = name.len() + 1;
        let fields = [
            ino,
            mode,
            uid,
            gid,
            1, // nlink
            0, // mtime
            size as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            namesize as u32,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn parents(&mut self, path: &str) {
        let mut acc = String::new();
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        for p in &parts[..parts.len().saturating_sub(1)] {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(p);
            if self.dirs.insert(acc.clone()) {
                let name = acc.clone();
                self.header(&name, 0o040755, 0, 0, 0);
            }
        }
    }

    fn clean(path: &str) -> String {
        path.trim_start_matches('/').to_string()
    }

    /// Adds a directory with the given permission bits.
    pub fn dir(&mut self, path: &str, perm: u32) {
        let p = Self::clean(path);
        self.parents(&p);
        if self.dirs.insert(p.clone()) {
            self.header(&p, 0o040000 | perm, 0, 0, 0);
        }
    }

    /// Adds a regular file owned by root.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        let p = Self::clean(path);
        self.parents(&p);
        self.header(&p, 0o100000 | perm, 0, 0, data.len());
        self.buf.extend_from_slice(data);
        self.pad();
    }

    /// Adds a symbolic link.
    pub fn symlink(&mut self, path: &str, target: &str) {
        let p = Self::clean(path);
        self.parents(&p);
        self.header(&p, 0o120777, 0, 0, target.len());
        self.buf.extend_from_slice(target.as_bytes());
        self.pad();
    }

    /// Adds a character device node (e.g. /dev/console, 5:1).
    pub fn chardev(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        let p = Self::clean(path);
        self.parents(&p);
        self.header_dev(&p, 0o020000 | perm, 0, 0, 0, (major, minor));
    }

    /// Finishes the archive with the trailer record.
    pub fn finish(mut self) -> Vec<u8> {
        self.header("TRAILER!!!", 0, 0, 0, 0);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    #[test]
    fn layout_is_newc() {
        let mut c = Cpio::new();
        c.file("/a/b", 0o644, b"xyz");
        let b = c.finish();
        assert!(b.starts_with(b"070701"));
        assert_eq!(b.len() % 4, 0);
        let s = String::from_utf8_lossy(&b);
        assert!(s.contains("a\0"));
        assert!(s.contains("a/b\0"));
        assert!(s.contains("TRAILER!!!"));
    }

    /// Cross-checks with the system's cpio when it is installed.
    #[test]
    fn system_cpio_lists_it() {
        let mut c = Cpio::new();
        c.file("etc/passwd", 0o644, b"root:x:0:0::/root:/bin/sh\n");
        c.symlink("bin/sh", "busybox");
        c.dir("tmp", 0o1777);
        let b = c.finish();
        let Ok(mut child) = Command::new("cpio")
            .args(["-t", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
        else {
            eprintln!("cpio not installed; skipping the cross-check");
            return;
        };
        child.stdin.take().unwrap().write_all(&b).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let list = String::from_utf8(out.stdout).unwrap();
        let names: Vec<&str> = list.lines().collect();
        assert_eq!(names, vec!["etc", "etc/passwd", "bin", "bin/sh", "tmp"]);
    }
}
