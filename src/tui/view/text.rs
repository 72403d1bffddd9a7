//! Text fitted to cells: padding and cutting to a width without splitting a character from
//! its combining marks, wrapping at spaces, and an age in the list's steps.

use crate::core::text::is_mark;

/// Pads or cuts `text` to exactly `width` columns (a combining mark takes none, and stays
/// with its character when the text is cut).
pub(crate) fn pad(text: &str, width: usize) -> String {
    let count = text.chars().filter(|c| !is_mark(*c)).count();
    if count <= width {
        format!("{text}{}", " ".repeat(width - count))
    } else if width == 0 {
        String::new()
    } else {
        let mut columns = 0;
        let mut cut = String::new();
        for c in text.chars() {
            if !is_mark(c) {
                if columns == width - 1 {
                    break;
                }
                columns += 1;
            }
            cut.push(c);
        }
        cut.push('…');
        cut
    }
}

/// An age as the screen shows it: the core's one spelling, so `check` and the screen agree
/// ("194 s" in both). The display steps of [`crate::tui::model::age_step`] follow it.
pub fn fmt_age(secs: f64) -> String {
    crate::core::assess::fmt_secs(secs)
}

/// Splits `text` into pieces of at most `width` characters, at spaces where it can. Wrapped
/// pieces are indented like the first so lists stay readable. A combining mark counts as no
/// column and stays with the character it sits on (900 of them used to take nine rows).
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let indent: String = text.chars().take_while(|c| *c == ' ').collect();
    let indent = if indent.len() + 10 < width {
        format!("{indent}  ")
    } else {
        String::new()
    };
    // One entry per character with the marks that follow it: what one column shows.
    let mut rest: Vec<&str> = Vec::new();
    let mut start = 0;
    for (at, c) in text.char_indices().skip(1) {
        if !is_mark(c) {
            rest.push(&text[start..at]);
            start = at;
        }
    }
    if start < text.len() {
        rest.push(&text[start..]);
    }
    let mut pieces = Vec::new();
    let mut first = true;
    while !rest.is_empty() {
        let room = if first {
            width
        } else {
            width.saturating_sub(indent.chars().count()).max(1)
        };
        if rest.len() <= room {
            let piece: String = rest.concat();
            pieces.push(if first {
                piece
            } else {
                format!("{indent}{piece}")
            });
            break;
        }
        let cut = rest[..room]
            .iter()
            .rposition(|c| *c == " ")
            .filter(|&at| at > room / 3)
            .unwrap_or(room);
        let piece: String = rest[..cut].concat();
        pieces.push(if first {
            piece
        } else {
            format!("{indent}{piece}")
        });
        rest.drain(..cut);
        let spaces = rest.iter().take_while(|c| **c == " ").count();
        rest.drain(..spaces);
        first = false;
    }
    if pieces.is_empty() {
        pieces.push(String::new());
    }
    pieces
}
