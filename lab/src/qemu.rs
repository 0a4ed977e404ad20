//! The host side: starts qemu-system-x86_64, follows the serial console, stops the guest
//! at the end or after the timeout.

use crate::console::{self, Progress};
use crate::error::{LabError, LabResult};
use crate::powercut::{LineWatcher, PowerCut};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How the guest CPU is emulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Pure emulation: works everywhere (the default).
    Tcg,
    /// Try KVM; if the guest prints nothing within [`KVM_PROBE`], rerun under TCG.
    KvmOrTcg,
}

/// How long a KVM boot may stay silent before the lab falls back to TCG.
pub const KVM_PROBE: Duration = Duration::from_secs(5);

/// The kernel command line. `nokaslr` keeps the kernel image on QEMU node 0, which makes
/// that node's MemTotal predictable.
/// `no_timer_check` skips the IO-APIC timer test, which a slow (loaded, emulated) CPU can
/// fail ("IO-APIC + timer doesn't work!" panic).
pub const BASE_CMDLINE: &str = "console=ttyS0 quiet panic=-1 nokaslr no_timer_check";

/// How long a TCG guest may print nothing at all. With `quiet` the first output is /init's
/// start marker, seconds after QEMU starts even for 8 nodes on a loaded host; a guest still
/// silent after this hung in its emulated boot (seen once in a few hundred boots of the 7.3
/// kernel) and is booted again, once, rather than waited on until the scenario's timeout.
pub const TCG_SILENT: Duration = Duration::from_secs(150);

/// The console tail of a guest that printed nothing at all.
pub const NO_OUTPUT: &str = "(the guest printed nothing)";

/// Lines of console kept in errors and outcomes.
pub const TAIL_LINES: usize = 40;

/// Everything needed to start one guest.
pub struct Launch<'a> {
    pub qemu: &'a Path,
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    pub disk: Option<&'a Path>,
    /// The disk is an image kept across runs (power-cut tests): open it with
    /// `cache=none,aio=native` instead of `cache=unsafe`.
    pub persistent_disk: bool,
    /// Record every write, discard and flush the guest sends to the disk in this file
    /// (QEMU's `blklogwrites`, dm-log-writes format; see [`crate::writelog`]).
    pub write_log: Option<&'a Path>,
    pub topology_args: Vec<String>,
    /// Extra kernel command-line words.
    pub kernel_args: &'a [String],
    pub timeout: Duration,
    /// Kill QEMU (SIGKILL) mid-scenario when this says.
    pub cut: Option<&'a PowerCut>,
    /// Under TCG, emulate all vCPUs on one host thread (`-accel tcg,thread=single`) instead
    /// of one thread per vCPU: see [`crate::Scenario::single_thread_tcg`].
    pub single_thread_tcg: bool,
    /// Under TCG, guest time counts instructions (`-icount`): see [`crate::Scenario::icount`].
    pub icount: bool,
}

/// What the console showed.
pub struct Transcript {
    pub console: String,
    pub output: String,
    /// Meaningless (-1) when the power was cut.
    pub exit_code: i32,
    pub boot: Duration,
    pub elapsed: Duration,
    /// When the power was cut, from QEMU's start.
    pub cut_at: Option<Duration>,
}

/// Locates the QEMU binary: `NUMAIO_LAB_QEMU`, else `qemu-system-x86_64` on PATH.
pub fn find_qemu() -> LabResult<PathBuf> {
    if let Some(p) = std::env::var_os("NUMAIO_LAB_QEMU").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(LabError::NoQemu(format!(
                "NUMAIO_LAB_QEMU={} does not exist",
                p.display()
            )))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
        .ok_or_else(|| LabError::NoQemu("not on PATH".into()))
}

fn command(l: &Launch, accel: Accel) -> Command {
    let mut c = Command::new(l.qemu);
    c.args([
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-serial",
        "stdio",
    ])
    .args(["-no-reboot", "-monitor", "none"]);
    match accel {
        // one instruction = 1 ns of guest time; an idle guest jumps to its next timer
        Accel::Tcg if l.icount => c.args([
            "-accel",
            "tcg,thread=single",
            "-icount",
            "shift=0,sleep=off",
        ]),
        Accel::Tcg if l.single_thread_tcg => c.args(["-accel", "tcg,thread=single"]),
        Accel::Tcg => c.args(["-accel", "tcg"]),
        Accel::KvmOrTcg => c.args(["-accel", "kvm", "-cpu", "host"]),
    };
    c.args(&l.topology_args)
        .arg("-kernel")
        .arg(l.vmlinuz)
        .arg("-initrd")
        .arg(l.initrd)
        .arg("-append")
        .arg(
            std::iter::once(BASE_CMDLINE)
                .chain(l.kernel_args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        );
    if let Some(d) = l.disk {
        // A private image needs no durability: cache=unsafe skips host flushes. An image
        // that outlives a power cut uses cache=none: QEMU writes with O_DIRECT and keeps no
        // cache of its own, the guest is shown a volatile write cache so its fsync must
        // send FLUSH (which QEMU turns into fdatasync on the image, and which dm-log-writes
        // records), and aio=native hands requests straight to the host kernel instead of
        // queueing them in QEMU's thread pool.
        let cache = if l.persistent_disk {
            "cache=none,aio=native"
        } else {
            "cache=unsafe"
        };
        match l.write_log {
            None => {
                c.arg("-drive")
                    .arg(format!("file={},format=raw,if=virtio,{cache}", d.display()));
            }
            Some(log) => {
                // the same caching as `cache=none,aio=native` above, under the logging
                // filter; the guest is shown a write cache so it sends flushes to log
                c.arg("-blockdev")
                    .arg(format!(
                        "driver=file,node-name=numaio-disk,filename={},cache.direct=on,aio=native",
                        d.display()
                    ))
                    .arg("-blockdev")
                    .arg(format!(
                        "driver=file,node-name=numaio-log,filename={}",
                        log.display()
                    ))
                    .arg("-blockdev")
                    .arg("driver=blklogwrites,node-name=numaio-logged,file=numaio-disk,log=numaio-log,log-sector-size=512")
                    .arg("-device")
                    .arg("virtio-blk-pci,drive=numaio-logged,write-cache=on");
            }
        }
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

enum Ended {
    Done(Transcript),
    /// KVM printed nothing in time.
    KvmSilent,
    /// TCG printed nothing within [`TCG_SILENT`].
    TcgSilent,
}

/// Kills the child on drop, so no guest outlives an error or a panic.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn reader<R: Read + Send + 'static>(mut r: R, tx: mpsc::Sender<(bool, Vec<u8>)>, is_stdout: bool) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send((is_stdout, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
}

fn once(l: &Launch, accel: Accel) -> LabResult<Ended> {
    let start = Instant::now();
    let child = command(l, accel)
        .spawn()
        .map_err(|e| LabError::NoQemu(format!("cannot start {}: {e}", l.qemu.display())))?;
    let mut guard = Guard(child);
    let (tx, rx) = mpsc::channel();
    reader(guard.0.stdout.take().expect("piped"), tx.clone(), true);
    reader(guard.0.stderr.take().expect("piped"), tx, false);

    let mut raw = Vec::new();
    let mut stderr = Vec::new();
    let mut boot = None;
    let mut finished: Option<(String, i32)> = None;
    let mut finished_at: Option<Instant> = None;
    let deadline = start + l.timeout;
    let mut watcher = l.cut.map(|c| LineWatcher::new(&c.prefix));
    let mut cut_due: Option<Instant> = None;
    let mut cut_at: Option<Duration> = None;
    loop {
        let now = Instant::now();
        if cut_due.is_some_and(|d| now >= d) && finished.is_none() {
            let _ = guard.0.kill();
            cut_at = Some(start.elapsed());
            // everything QEMU wrote before it died is still in the pipes
            let drain_until = Instant::now() + Duration::from_secs(3);
            while let Some(left) = drain_until.checked_duration_since(Instant::now()) {
                match rx.recv_timeout(left) {
                    Ok((true, bytes)) => raw.extend_from_slice(&bytes),
                    Ok((false, bytes)) => stderr.extend_from_slice(&bytes),
                    Err(_) => break,
                }
            }
            break;
        }
        // after the end marker QEMU should power off at once; don't wait for it long
        let limit = match finished_at {
            Some(t) => (t + Duration::from_secs(5)).min(deadline.max(now)),
            None => deadline,
        };
        if now >= limit {
            break;
        }
        if accel == Accel::KvmOrTcg && raw.is_empty() && now - start > KVM_PROBE {
            return Ok(Ended::KvmSilent);
        }
        if accel == Accel::Tcg && raw.is_empty() && now - start > TCG_SILENT && cut_due.is_none() {
            return Ok(Ended::TcgSilent);
        }
        let limit = cut_due.map_or(limit, |d| d.max(now).min(limit));
        let wait = (limit - now).min(Duration::from_millis(200));
        match rx.recv_timeout(wait) {
            Ok((true, bytes)) => {
                raw.extend_from_slice(&bytes);
                if let (Some(w), Some(c), None) = (watcher.as_mut(), l.cut, cut_due) {
                    if w.feed(&raw) >= c.lines {
                        cut_due = Some(Instant::now() + c.delay);
                    }
                }
                // parse the whole transcript only when a marker may have arrived (new
                // bytes plus a marker's length before them hold "@@"), so long outputs
                // stay linear
                let window = &raw[raw.len().saturating_sub(bytes.len() + 64)..];
                let marker_near = window.windows(2).any(|w| w == b"@@");
                if finished.is_none() && marker_near {
                    let text = console::strip_escapes(&String::from_utf8_lossy(&raw));
                    match console::parse(&text) {
                        Progress::Booting => {}
                        Progress::Running(_) => {
                            boot.get_or_insert_with(|| start.elapsed());
                        }
                        Progress::Done { output, exit_code } => {
                            boot.get_or_insert_with(|| start.elapsed());
                            finished = Some((output, exit_code));
                            finished_at = Some(Instant::now());
                        }
                    }
                }
            }
            Ok((false, bytes)) => stderr.extend_from_slice(&bytes),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break, // both pipes closed: QEMU exited
        }
    }
    if cut_at.is_some() {
        let console = console::strip_escapes(&String::from_utf8_lossy(&raw));
        let boot = boot.unwrap_or_default();
        let progress = match console::parse(&console) {
            // the watcher saw the start marker; parse is stricter about its line
            Progress::Booting => Progress::Running(String::new()),
            p => p,
        };
        return Ok(Ended::Done(match progress {
            // the end marker came in with the last bytes: the scenario finished first
            Progress::Done { output, exit_code } => Transcript {
                console,
                output,
                exit_code,
                boot,
                elapsed: start.elapsed(),
                cut_at: None,
            },
            Progress::Running(output) => Transcript {
                console,
                output,
                exit_code: -1,
                boot,
                elapsed: start.elapsed(),
                cut_at,
            },
            Progress::Booting => unreachable!("mapped to Running above"),
        }));
    }
    let status = if finished.is_some() || Instant::now() < deadline {
        // QEMU exited (or is about to); collect its status
        let t = Instant::now();
        loop {
            if let Ok(Some(s)) = guard.0.try_wait() {
                break Some(s);
            }
            if t.elapsed() > Duration::from_secs(2) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    } else {
        None
    };
    let console = console::strip_escapes(&String::from_utf8_lossy(&raw));
    let tail = if console.trim().is_empty() {
        NO_OUTPUT.to_string()
    } else {
        console::tail(&console, TAIL_LINES)
    };
    match finished {
        Some((output, exit_code)) => Ok(Ended::Done(Transcript {
            console,
            output,
            exit_code,
            boot: boot.unwrap_or_default(),
            elapsed: start.elapsed(),
            cut_at: None,
        })),
        None if Instant::now() >= deadline => {
            if accel == Accel::KvmOrTcg && raw.is_empty() {
                return Ok(Ended::KvmSilent);
            }
            let phase = if boot.is_some() {
                "started but did not finish".to_string()
            } else {
                "never started: the guest did not reach /init's start marker".to_string()
            };
            Err(LabError::Timeout {
                secs: l.timeout.as_secs(),
                phase,
                console_tail: tail,
            })
        }
        None if boot.is_some() || console.contains("Kernel panic") => Err(LabError::GuestDied {
            started: boot.is_some(),
            console_tail: tail,
        }),
        None => Err(LabError::QemuFailed {
            status: status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unknown".into()),
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
            console_tail: tail,
        }),
    }
}

/// Kernel panics before the scenario starts that [`launch`] boots again after.
const BOOT_PANIC_RETRIES: u32 = 2;

/// Boots the guest and waits for the scenario's end marker. A kernel panic before the
/// scenario starts is retried up to [`BOOT_PANIC_RETRIES`] times (emulated boots under heavy
/// host load can trip timing checks), a silent boot once; the next failure is reported.
pub fn launch(l: &Launch, accel: Accel) -> LabResult<Transcript> {
    let silent = || LabError::Timeout {
        secs: TCG_SILENT.as_secs(),
        phase: "never started: the guest printed nothing, twice".to_string(),
        console_tail: NO_OUTPUT.to_string(),
    };
    let mut panics = 0;
    loop {
        match launch_once(l, accel) {
            Err(LabError::GuestDied { started: false, .. }) if panics < BOOT_PANIC_RETRIES => {
                panics += 1;
                eprintln!(
                    "numaio-lab: the guest kernel panicked while booting; retrying \
                     ({panics} of {BOOT_PANIC_RETRIES})"
                );
            }
            Ok(None) => {
                eprintln!(
                    "numaio-lab: the guest printed nothing in {} s (a hung emulated boot); \
                     retrying once",
                    TCG_SILENT.as_secs()
                );
                return launch_once(l, accel)?.ok_or_else(silent);
            }
            Ok(Some(t)) => return Ok(t),
            Err(e) => return Err(e),
        }
    }
}

/// One boot (with KVM's fall back to TCG); `None`: a TCG guest that stayed silent.
fn launch_once(l: &Launch, accel: Accel) -> LabResult<Option<Transcript>> {
    let first = match once(l, accel) {
        // KVM may also fail outright (no /dev/kvm, no permission): fall back as well
        Err(LabError::QemuFailed { console_tail, .. })
            if accel == Accel::KvmOrTcg && console_tail == NO_OUTPUT =>
        {
            Ended::KvmSilent
        }
        other => other?,
    };
    match first {
        Ended::Done(t) => return Ok(Some(t)),
        Ended::TcgSilent => return Ok(None),
        Ended::KvmSilent => {}
    }
    eprintln!("numaio-lab: the KVM guest failed or stayed silent; falling back to TCG");
    match once(l, Accel::Tcg)? {
        Ended::Done(t) => Ok(Some(t)),
        Ended::TcgSilent => Ok(None),
        Ended::KvmSilent => unreachable!("TCG never reports KvmSilent"),
    }
}
