//! `numaio generate`: man pages for the command and every subcommand, and bash, zsh and fish
//! completions, all from the definitions `--help` uses.

use std::path::Path;
use std::process::Command;

fn numaio(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numaio"))
        .args(args)
        .output()
        .expect("run numaio")
}

/// The subcommands `numaio --help` lists.
fn subcommands() -> Vec<String> {
    let out = numaio(&["--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    let cmds: Vec<String> = help
        .split("Commands:")
        .nth(1)
        .expect("a Commands: section")
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(cmds.len() >= 10, "{cmds:?}");
    cmds
}

fn generate(dir: &Path) {
    let man = dir.join("man");
    let comp = dir.join("completions");
    let out = numaio(&[
        "generate",
        "--man",
        man.to_str().unwrap(),
        "--completions",
        comp.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn man_pages_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path());
    let man = dir.path().join("man");
    let top = std::fs::read_to_string(man.join("numaio.1")).unwrap();
    assert!(
        top.starts_with(".ie") || top.contains(".TH numaio 1"),
        "{top}"
    );
    assert!(
        top.contains("Exit status"),
        "exit table missing from numaio.1"
    );
    for sub in subcommands() {
        let p = man.join(format!("numaio-{sub}.1"));
        let page = std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("no man page {}: {e}", p.display()));
        assert!(
            page.contains(&format!(".TH numaio-{sub} 1")),
            "{sub}: {page}"
        );
        assert!(top.contains(&sub), "numaio.1 does not list {sub}");
    }
    // The packagers' command documents nothing of itself.
    assert!(!man.join("numaio-generate.1").exists());
    assert!(!top.contains("generate"));
    // `man` renders it, where man is installed.
    if Command::new("man").arg("--version").output().is_ok() {
        let out = Command::new("man")
            .arg("-l")
            .arg(man.join("numaio-topo.1"))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("SYNOPSIS"), "{text}");
    } else {
        eprintln!("SKIPPED: man_pages_for_every_subcommand (rendering): man is not installed");
    }
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path());
    let comp = dir.path().join("completions");
    let bash = std::fs::read_to_string(comp.join("numaio.bash")).unwrap();
    let zsh = std::fs::read_to_string(comp.join("_numaio")).unwrap();
    let fish = std::fs::read_to_string(comp.join("numaio.fish")).unwrap();
    assert!(bash.contains("complete -F _numaio"), "{bash}");
    assert!(zsh.starts_with("#compdef numaio"), "{zsh}");
    assert!(fish.contains("complete -c numaio"), "{fish}");
    for sub in subcommands() {
        for (shell, text) in [("bash", &bash), ("zsh", &zsh), ("fish", &fish)] {
            assert!(text.contains(&sub), "{shell} completion lacks {sub}");
        }
    }
    for (shell, text) in [("bash", &bash), ("zsh", &zsh), ("fish", &fish)] {
        assert!(
            !text.contains("generate"),
            "{shell} completion offers generate"
        );
    }
    // A flag of a subcommand is completed too.
    assert!(bash.contains("--one-file-system") || bash.contains("--json"));
    // The script is valid bash.
    let out = Command::new("bash")
        .arg("-n")
        .arg(comp.join("numaio.bash"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_generate_arguments() {
    let out = numaio(&["generate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to generate"));
    let out = numaio(&["generate", "--man", "/proc/self/no-such-dir/man"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/proc/self/no-such-dir/man"), "{err}");
    // Hidden from the main help.
    let help = String::from_utf8(numaio(&["--help"]).stdout).unwrap();
    assert!(!help.contains("generate"), "{help}");
}
