//! Making text that jobs write inert before it reaches a terminal.
//!
//! Log lines, lock contents, manifest fields, check output and even job names come from
//! outside mihari. Any of them can carry escape sequences that retitle the terminal, clear
//! the screen, or reorder text with bidirectional overrides. [`inert`] is the one gate every
//! such string passes: colour and control sequences are dropped whole, other controls are
//! made visible as control pictures (␛, ␇, ␊...), bidi controls and the Unicode line and
//! paragraph separators become '�', and a pile of combining marks is cut to [`MAX_MARKS`]
//! per character. It must never let a control byte through; it must not allocate more than
//! the input needs.

use unicode_width::UnicodeWidthChar;

/// The most combining marks (and other zero-width characters) kept on one character.
///
/// Two is what real text needs (Vietnamese stacks two accents on a letter; a keycap or an
/// emoji with its presentation selector uses two) and what xterm keeps in a cell by default
/// (`combiningChars: 2`). A pile of hundreds ("zalgo" text, or a job printing garbage) is
/// drawn by many terminals above and below its row, over the rows of other jobs, and it made
/// the dashboard's wrap spend a row per hundred marks; past two, marks are dropped.
pub const MAX_MARKS: usize = 2;

/// Returns `raw` with every control character and escape sequence made inert.
///
/// - CSI sequences (`ESC [ ... final`, or 8-bit `U+009B`) are removed: they are colours and
///   cursor moves, and the words around them stay readable.
/// - OSC, DCS, SOS, PM and APC strings (`ESC ]`, `ESC P`, `ESC X`, `ESC ^`, `ESC _` and their
///   8-bit forms) are removed up to and including their terminator (BEL or ST), or to the end
///   of the text when unterminated: their payload is never shown, never interpreted.
/// - Any other ESC is shown as '␛' followed by the next character as plain text.
/// - Other C0 controls and DEL become their control pictures (U+2400..); tab becomes a space.
/// - Other C1 controls, bidirectional marks, embeddings, overrides and isolates, and the
///   line and paragraph separators (U+2028, U+2029: a line break to YAML 1.1 and to some
///   terminals) become '�'.
/// - Past [`MAX_MARKS`] combining marks in a row on one character, the rest are dropped.
pub fn inert(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    // Marks since the last character that takes a cell of its own, in the output: a dropped
    // sequence between them does not part a mark from the character it lands on.
    let mut marks = 0;
    while let Some(c) = chars.next() {
        if is_mark(c) {
            if marks < MAX_MARKS {
                marks += 1;
                out.push(c);
            }
            continue;
        }
        let before = out.len();
        match c {
            '\u{1b}' => match chars.peek().copied() {
                Some('[') => {
                    chars.next();
                    skip_csi(&mut chars);
                }
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    chars.next();
                    skip_string(&mut chars);
                }
                _ => out.push('\u{241b}'),
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            '\t' => out.push(' '),
            c if (c as u32) < 0x20 => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('�')),
            '\u{7f}' => out.push('\u{2421}'),
            c if is_c1(c) || is_bidi_control(c) => out.push('�'),
            c => out.push(c),
        }
        if out.len() > before {
            marks = 0;
        }
    }
    out
}

/// Returns `text` with every path in it cut to its last part (`'/data/raw/x.log'` becomes
/// `'…/x.log'`): the event log never holds raw paths (SPEC §6), yet an error recorded there
/// should still say which file. A path is a quoted value holding a '/', or an unquoted word
/// starting with '/' or '~/'.
pub fn without_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('\'') {
        out.push_str(&words_without_paths(&rest[..open]));
        let after = &rest[open + 1..];
        let Some(close) = after.find('\'') else {
            out.push('\'');
            out.push_str(&words_without_paths(after));
            return out;
        };
        let quoted = &after[..close];
        out.push('\'');
        if quoted.contains('/') {
            out.push_str(&last_part(quoted));
        } else {
            out.push_str(quoted);
        }
        out.push('\'');
        rest = &after[close + 1..];
    }
    out.push_str(&words_without_paths(rest));
    out
}

/// Unquoted text with each word that starts like a path cut to its last part.
fn words_without_paths(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            if word.starts_with('/') || word.starts_with("~/") {
                last_part(word)
            } else {
                word.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `…/` and the last part of `path`.
fn last_part(path: &str) -> String {
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    format!("…/{name}")
}

/// Whether `text` could be written to a terminal as is: no controls, no bidi controls, no
/// more than [`MAX_MARKS`] marks on a character. Tests and debug assertions use it to check
/// [`inert`]'s promise; the jobs file uses it to refuse names that would not read as written.
pub fn is_inert(text: &str) -> bool {
    let mut marks = 0;
    for c in text.chars() {
        if (c as u32) < 0x20 || c == '\u{7f}' || is_c1(c) || is_bidi_control(c) {
            return false;
        }
        if is_mark(c) {
            marks += 1;
            if marks > MAX_MARKS {
                return false;
            }
        } else {
            marks = 0;
        }
    }
    true
}

/// Whether `c` is drawn in the cell of the character before it: a combining accent, a
/// zero-width joiner, a variation selector (everything of display width zero that is not a
/// control). [`inert`] keeps at most [`MAX_MARKS`] of them in a row; a wrap counts them as
/// taking no column and never parts them from their character.
pub fn is_mark(c: char) -> bool {
    !c.is_ascii() && !is_c1(c) && !is_bidi_control(c) && c.width() == Some(0)
}

fn is_c1(c: char) -> bool {
    ('\u{80}'..='\u{9f}').contains(&c)
}

/// A character that reorders or breaks the text around it without being seen: the
/// bidirectional marks, embeddings, overrides and isolates (U+202E makes 'txt.exe' read
/// 'exe.txt'), and the line and paragraph separators. Nothing that shows text a job wrote
/// may pass one on as it is.
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// Skips a CSI sequence after its introducer: parameter and intermediate bytes up to a final
/// byte in '@'..='~'. A control or a non-ASCII character inside ends it early (the terminal
/// would abort the sequence there too), and that character is left for the caller.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(&c) = chars.peek() {
        match c {
            '\u{20}'..='\u{3f}' => {
                chars.next();
            }
            '\u{40}'..='\u{7e}' => {
                chars.next();
                return;
            }
            _ => return,
        }
    }
}

/// Skips a control string (OSC, DCS, ...) up to and including BEL, `ESC \` or 8-bit ST.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cut_to_their_last_part_and_other_words_kept() {
        let cases = [
            (
                "cannot open the job's log '/data/raw/collect.log' for its output: denied",
                "cannot open the job's log '…/collect.log' for its output: denied",
            ),
            (
                "cannot start /usr/local/bin/mihari: not found",
                "cannot start …/mihari: not found",
            ),
            ("see ~/jobs/a.yaml", "see …/a.yaml"),
            ("'/tmp/dir/' gone", "'…/dir' gone"),
            (
                "3/400 done, check 'no_gaps' failed",
                "3/400 done, check 'no_gaps' failed",
            ),
            ("an unmatched ' quote /x/y", "an unmatched ' quote …/y"),
            ("no path here", "no path here"),
        ];
        for (raw, want) in cases {
            assert_eq!(without_paths(raw), want, "{raw}");
        }
    }

    #[test]
    fn colours_are_dropped_and_words_kept() {
        assert_eq!(
            inert("\u{1b}[31mERROR\u{1b}[0m disk full"),
            "ERROR disk full"
        );
    }

    #[test]
    fn title_change_and_its_payload_never_pass() {
        let out = inert("before\u{1b}]0;pwned\u{7}after");
        assert_eq!(out, "beforeafter");
        let out = inert("a\u{1b}]2;x\u{1b}\\b");
        assert_eq!(out, "ab");
        let out = inert("unterminated \u{1b}]0;still hidden");
        assert_eq!(out, "unterminated ");
    }

    #[test]
    fn eight_bit_forms_are_handled_like_seven_bit() {
        assert_eq!(inert("x\u{9b}2Jy"), "xy");
        assert_eq!(inert("x\u{9d}0;t\u{9c}y"), "xy");
        assert_eq!(inert("x\u{85}y"), "x�y");
    }

    #[test]
    fn other_controls_become_visible() {
        assert_eq!(inert("a\rb\u{8}c\u{7}"), "a\u{240d}b\u{2408}c\u{2407}");
        assert_eq!(inert("a\u{1b}cb"), "a\u{241b}cb");
        assert_eq!(inert("t\tab"), "t ab");
    }

    #[test]
    fn a_pile_of_marks_is_cut_to_two_per_character() {
        let pile = format!("e{}x", "\u{301}".repeat(900));
        assert_eq!(inert(&pile), "e\u{301}\u{301}x");
        assert!(!is_inert(&pile));
        // Two are ordinary text and kept: a decomposed Vietnamese letter, a keycap.
        for text in [
            "vie\u{323}\u{302}t",
            "1\u{fe0f}\u{20e3}",
            "\u{301}\u{301}at the start",
        ] {
            assert!(is_inert(text), "{text}");
            assert_eq!(inert(text), text);
        }
        // A sequence dropped between them does not part marks from their letter.
        assert_eq!(inert("e\u{301}\u{1b}[31m\u{301}\u{301}"), "e\u{301}\u{301}");
        // Bidi controls have no width either, and are still never let through.
        assert_eq!(inert("a\u{202e}\u{202e}\u{202e}b"), "a���b");
    }

    #[test]
    fn bidi_overrides_cannot_reorder_text() {
        assert_eq!(inert("invoice\u{202e}fdp.exe"), "invoice�fdp.exe");
        assert!(is_inert(&inert("\u{2066}x\u{2069}")));
    }

    /// A line separator is a line break to a YAML 1.1 reader and to some terminals: a
    /// comment holding one would end there and what follows would be read, or drawn, as a
    /// line of its own.
    #[test]
    fn line_and_paragraph_separators_cannot_break_a_line() {
        assert_eq!(inert("a\u{2028}key: b\u{2029}c"), "a�key: b�c");
        assert!(!is_inert("a\u{2028}b"));
        for c in [
            '\u{200e}', '\u{200f}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}',
        ] {
            assert!(is_bidi_control(c), "{c:?}");
        }
    }
}
