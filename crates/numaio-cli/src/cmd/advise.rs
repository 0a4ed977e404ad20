//! `numaio advise`: configuration advice from the Python package `numaio_advisor`.
//!
//! The advisor (scikit-learn models trained on measured runs) lives in `python/`; this module
//! finds a Python that has it, runs `python3 -m numaio_advisor ARGS...` directly (no shell),
//! and passes its exit status on. When Python or the package is missing it says so once,
//! with the command that installs them.

use anyhow::Context;
use clap::CommandFactory;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct AdviseArgs {
    /// The advisor's arguments: FROM (a Darshan log, `numaio ps --json` capture, `numaio bench
    /// --json` result, fio JSON, or a pid), or `collect`, `validate`, `features`; `--help`
    /// lists them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Exit status when Python or the advisor's packages are missing (an error; the Python side
/// uses the same).
const MISSING_EXIT: u8 = crate::exit::ERROR;

/// A checkout of numaio above the running binary (`target/release/numaio` lies inside one).
fn checkout() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .find(|d| d.join("python/numaio_advisor/__main__.py").is_file())
        .map(Path::to_path_buf)
}

fn install_hint(root: Option<&Path>) -> String {
    match root {
        Some(r) => format!("{}", r.join("scripts/setup-python.sh").display()),
        None => "scripts/setup-python.sh (in the numaio checkout)".to_string(),
    }
}

/// `NUMAIO_PYTHON`, else the checkout's `.venv`, else `python3` from PATH.
fn python(root: Option<&Path>) -> PathBuf {
    if let Some(p) = std::env::var_os("NUMAIO_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(venv) = root.map(|r| r.join(".venv/bin/python3")) {
        if venv.is_file() {
            return venv;
        }
    }
    PathBuf::from("python3")
}

fn command(py: &Path, root: Option<&Path>) -> Command {
    let mut cmd = Command::new(py);
    // The checkout's package is found even when it was never pip-installed; an installed copy
    // still wins for the dependencies.
    if let Some(r) = root {
        let mut paths = vec![r.join("python")];
        if let Some(old) = std::env::var_os("PYTHONPATH") {
            paths.extend(std::env::split_paths(&old));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("PYTHONPATH", joined);
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        cmd.env("NUMAIO_BIN", exe);
    }
    cmd
}

/// Whether the arguments ask for help rather than advice: `--help` or `-h` anywhere, as
/// the advisor's argument parser takes them.
fn asks_for_help(args: &[OsString]) -> bool {
    args.iter().any(|a| a == "--help" || a == "-h")
}

/// `numaio advise --help` without the advisor: clap's help of this command, the forms the
/// advisor takes, and how to install it.
fn fallback_help(py: &Path, hint: &str) -> String {
    let about = crate::Cli::command()
        .find_subcommand("advise")
        .map(|c| {
            c.clone()
                .bin_name("numaio advise")
                .render_long_help()
                .to_string()
        })
        .unwrap_or_default();
    format!(
        "{about}\n\
         Forms (the advisor's own --help lists every option):\n  \
         numaio advise FROM [--json] [--top N]   FROM: a Darshan log, a `numaio ps --json` capture,\n  \
         {:39} a `numaio bench --json` result, fio JSON, or a pid\n  \
         numaio advise features FROM             the feature table of a source\n  \
         numaio advise validate                  the validation tables (markdown)\n  \
         numaio advise collect --out FILE        measure a corpus here (resumable)\n\n\
         The advisor is the Python package numaio_advisor, not found for {}; install it\n\
         and its dependencies with: {hint}\n\
         (docs/advisor.md describes it)\n",
        "",
        py.display()
    )
}

pub fn run(a: AdviseArgs) -> anyhow::Result<ExitCode> {
    let root = checkout();
    let py = python(root.as_deref());
    let hint = install_hint(root.as_deref());
    let probe = command(&py, root.as_deref())
        .args([
            "-c",
            "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('numaio_advisor') else 3)",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let missing = match probe {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "advise: needs Python 3, and {} was not found; install python3 (Debian: \
             apt-get install python3 python3-venv), then run {hint}",
            py.display()
        )),
        Err(e) => Some(format!(
            "advise: could not start {}: {e}; set NUMAIO_PYTHON to a working Python 3, \
             or run {hint}",
            py.display()
        )),
        Ok(s) if !s.success() => Some(format!(
            "advise: {} has no numaio_advisor package; install it and its dependencies with: {hint}",
            py.display()
        )),
        Ok(_) => None,
    };
    if let Some(msg) = missing {
        // Help prints whatever is installed: the advisor's own lists every option, this one
        // says what the command does and how to get the advisor.
        if asks_for_help(&a.args) {
            crate::out!("{}", fallback_help(&py, &hint))?;
            crate::output::flush_out()?;
            return Ok(ExitCode::SUCCESS);
        }
        crate::warnln!("{msg}");
        return Ok(ExitCode::from(MISSING_EXIT));
    }
    crate::output::flush_out()?;
    let status = command(&py, root.as_deref())
        .args(["-m", "numaio_advisor"])
        .args(&a.args)
        .status()
        .with_context(|| format!("running {} -m numaio_advisor", py.display()))?;
    Ok(match status.code() {
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => {
            use std::os::unix::process::ExitStatusExt;
            crate::warnln!(
                "advise: {} -m numaio_advisor was killed by signal {}",
                py.display(),
                status.signal().unwrap_or(0)
            );
            ExitCode::FAILURE
        }
    })
}
