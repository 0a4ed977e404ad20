//! Serial console parsing: terminal escape sequences are stripped, and the scenario's output
//! is cut out between the markers the guest's /init prints.

/// Printed by /init (after an empty line) right before the scenario starts.
pub const START_MARKER: &str = "@@NUMAIO-LAB-START@@";
/// Printed by /init after the scenario as `@@NUMAIO-LAB-END rc=N@@`.
pub const END_MARKER: &str = "@@NUMAIO-LAB-END rc=";

/// Removes ANSI/VT escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ST`,
/// two-byte `ESC x`, charset `ESC ( B`) and carriage returns.
pub fn strip_escapes(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut it = raw.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\x1b' => match it.next() {
                Some('[') => {
                    // parameters and intermediates, then one final byte in @..~
                    for c in it.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    while let Some(c) = it.next() {
                        if c == '\x07' {
                            break;
                        }
                        if c == '\x1b' && it.peek() == Some(&'\\') {
                            it.next();
                            break;
                        }
                    }
                }
                Some('(') | Some(')') | Some('#') => {
                    it.next();
                }
                _ => {}
            },
            '\r' => {}
            _ => out.push(c),
        }
    }
    out
}

/// Where a console transcript stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// The start marker has not appeared yet.
    Booting,
    /// The scenario is running; output so far.
    Running(String),
    /// The scenario finished: its output and exit status.
    Done { output: String, exit_code: i32 },
}

/// Parses a (stripped) console transcript.
pub fn parse(console: &str) -> Progress {
    let start_line = format!("\n{START_MARKER}\n");
    let Some(s) = console.find(&start_line) else {
        // the marker may also be the very first line
        if let Some(rest) = console.strip_prefix(&format!("{START_MARKER}\n")) {
            return parse_body(rest);
        }
        return Progress::Booting;
    };
    parse_body(&console[s + start_line.len()..])
}

fn parse_body(body: &str) -> Progress {
    // /init prints "\n" before the end marker so it starts a line; that newline is not
    // part of the scenario's output.
    let end = format!("\n{END_MARKER}");
    match body.find(&end) {
        None => Progress::Running(body.to_string()),
        Some(e) => {
            let tail = &body[e + end.len()..];
            let code: String = tail.chars().take_while(|c| c.is_ascii_digit()).collect();
            match code.parse::<i32>() {
                Ok(exit_code) if tail[code.len()..].starts_with("@@") => Progress::Done {
                    output: body[..e].to_string(),
                    exit_code,
                },
                _ => Progress::Running(body.to_string()),
            }
        }
    }
}

/// The last `lines` lines of a transcript.
pub fn tail(console: &str, lines: usize) -> String {
    let all: Vec<&str> = console.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_the_escapes_glued_to_the_first_line() {
        let raw = "\x1bc\x1b[?7l\x1b[2J\x1b[0mhello\r\nworld\x1b]0;title\x07!\r\n";
        assert_eq!(strip_escapes(raw), "hello\nworld!\n");
    }

    #[test]
    fn extracts_output_and_status() {
        let c =
            format!("boot noise\n\n{START_MARKER}\nline 1\nline 2\n\n{END_MARKER}3@@\nreboot\n");
        assert_eq!(
            parse(&c),
            Progress::Done {
                output: "line 1\nline 2\n".into(),
                exit_code: 3
            }
        );
        let c = format!("\n{START_MARKER}\nno newline\n{END_MARKER}0@@\n");
        assert_eq!(
            parse(&c),
            Progress::Done {
                output: "no newline".into(),
                exit_code: 0
            }
        );
    }

    #[test]
    fn incomplete_transcripts() {
        assert_eq!(parse("kernel panic"), Progress::Booting);
        let c = format!("x\n{START_MARKER}\npartial\n{END_MARKER}1");
        assert!(matches!(parse(&c), Progress::Running(_)));
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
