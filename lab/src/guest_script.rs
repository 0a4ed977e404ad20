//! Pieces of guest scenarios that lab tests share: output split into named sections, and
//! shell preludes that name the node disks.
//!
//! A scenario marks its output with `echo "@@begin NAME"` lines; [`section`] returns what
//! came between one and the next, so a test can look at each step's output on its own
//! (e.g. `node-disk-stat` before and after a writer). [`crate::Outcome::section`] and
//! [`crate::Outcome::section_json`] do the same and panic with the run's report when the
//! section is missing, which is what a test wants.

/// The line that starts section `name`.
pub fn begin(name: &str) -> String {
    format!("@@begin {name}")
}

/// The text between the line `@@begin NAME` and the next `@@begin` line (or the end);
/// `None` if there is no such line.
pub fn section<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    let marker = begin(name);
    let mut pos = 0;
    // a marker must be a whole line: `@@begin a` is not the start of `@@begin ab`
    let start = loop {
        let i = pos + output[pos..].find(&marker)?;
        let at_line_start = i == 0 || output.as_bytes()[i - 1] == b'\n';
        let rest = &output[i + marker.len()..];
        if at_line_start && (rest.is_empty() || rest.starts_with('\n')) {
            break (i + marker.len() + 1).min(output.len());
        }
        pos = i + marker.len();
    };
    let body = &output[start..];
    let end = body
        .match_indices("@@begin ")
        .find(|(i, _)| *i == 0 || body.as_bytes()[i - 1] == b'\n')
        .map_or(body.len(), |(i, _)| i);
    Some(&body[..end])
}

/// The first line of `text` that starts with `{` and parses as JSON.
pub fn first_json(text: &str) -> Option<serde_json::Value> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str(l.trim()).ok())
}

/// A shell function for scenarios that run the eBPF collector: `no_nio_programs` waits
/// until no program of the collector is loaded (at most 10 s: the kernel frees a dead
/// process's programs after an RCU grace period) and prints `numaio-probe bpf-io
/// --count-programs`'s last answer (`{"programs": 0}` when none is left).
pub const BPF_PRELUDE: &str = r#"
no_nio_programs() {
  for i in 1 2 3 4 5 6 7 8 9 10; do
    n=$(numaio-probe bpf-io --count-programs); [ "$n" = '{"programs": 0}' ] && break; sleep 1
  done
  echo "$n"
}
"#;

/// Shell lines that set `$devs` (the `k`-th disk of each listed guest node, in the order
/// given, space-separated) and `$dargs` (`-d DEV` for each, for `numaio fs`), and print
/// `$devs` as section `devs`. The scenario exits with 10 if a node has no such disk.
pub fn node_disks_prelude(guest_nodes: &[u32], k: u32) -> String {
    let list: Vec<String> = guest_nodes.iter().map(u32::to_string).collect();
    format!(
        r#"
devs=""; for n in {list}; do d=$(node-disk $n {k}) || exit 10; devs="$devs $d"; done
dargs=""; for d in $devs; do dargs="$dargs -d $d"; done
echo "{begin}"; echo $devs
"#,
        list = list.join(" "),
        begin = begin("devs"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_whole_lines() {
        let out = "x\n@@begin ab\n1\n@@begin a\n2\n3\n@@begin b\n@@begin c";
        assert_eq!(section(out, "a"), Some("2\n3\n"));
        assert_eq!(section(out, "ab"), Some("1\n"));
        assert_eq!(section(out, "b"), Some(""));
        assert_eq!(section(out, "c"), Some(""));
        assert_eq!(section(out, "d"), None);
        // a marker inside a line is not one
        assert_eq!(section("say @@begin a\n1\n", "a"), None);
        assert_eq!(
            section("@@begin a\nsay @@begin b\n", "a"),
            Some("say @@begin b\n")
        );
    }

    #[test]
    fn first_json_skips_noise() {
        let v = first_json("mounting\n{bad\n{\"a\": 1}\n{\"a\": 2}\n").unwrap();
        assert_eq!(v["a"], 1);
        assert!(first_json("none\n").is_none());
    }

    #[test]
    fn prelude_names_the_nodes() {
        let p = node_disks_prelude(&[0, 2], 1);
        assert!(p.contains("for n in 0 2; do d=$(node-disk $n 1)"), "{p}");
        assert!(p.contains("echo \"@@begin devs\""), "{p}");
    }
}
