//! A quick reader for the plain YAML most jobs files are written in, which gives the raw form
//! serde-saphyr would give, or declines.
//!
//! This module owns the fast path of loading: block mappings and lists (a list's items may be
//! compact mappings, `- id: x`), one-line scalars (plain, 'single' or "double" quoted),
//! one-line flow lists and mappings (`[a, b]`, `{cmdline: 'x'}`), block scalars (`>-`, `|`)
//! whose body is one indentation with no blank line inside, comments and blank lines.
//! It declines — returns `None` — at the first thing outside that subset (an anchor, an alias,
//! a merge key, a tag, any other block scalar, a value over several lines, a tab, a document marker,
//! a quoted key, an escape other than `\"` and `\\`), at a repeated key, at a plain scalar
//! whose type it is not sure of (`yes`, `0x1F`, `1e3`, `.5`, `~`, a number where text is
//! expected), and at anything the raw form itself refuses (an unknown key, a wrong type).
//! The caller then reads the file with serde-saphyr, whose errors carry the refusal's words
//! and position, and whose budgets bound an alias bomb. So this reader never refuses a file
//! and never accepts one that serde-saphyr would read differently: it only reads the common
//! case in a fraction of the time (a 10,000-job file: 0.3 s of CPU less per load).
//!
//! Positions are kept (line and column of each value), but a refusal is never worded from
//! them: validation that refuses a file read here is run again on serde-saphyr's reading.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

/// How deep mappings and lists may nest before the reader declines (a jobs file needs six).
const MAX_DEPTH: usize = 24;

/// The file read as `T` (the raw form), or `None` when the quick reader declines it.
pub(super) fn read<T: for<'de> Deserialize<'de>>(source: &str) -> Option<T> {
    let root = Reader::new(source)?.document()?;
    T::deserialize(NodeDe(&root)).ok()
}

/// A value of the file, with the line and column (1-based, in characters) where it starts.
#[derive(Debug)]
struct Node<'a> {
    value: Value<'a>,
    line: u32,
    column: u32,
}

#[derive(Debug)]
enum Value<'a> {
    /// No value (`key:` with nothing under it), or `~`, `null`, `Null`, `NULL`.
    Null,
    /// A plain scalar, typed when it is asked for.
    Plain(&'a str),
    /// A quoted scalar: always text.
    Quoted(Cow<'a, str>),
    List(Vec<Node<'a>>),
    Map(Vec<(&'a str, Node<'a>)>),
}

/// One line of the file: its indentation and what follows it, comments and trailing blanks
/// left in (they are cut where a value ends).
#[derive(Clone, Copy)]
struct Line<'a> {
    number: u32,
    indent: usize,
    text: &'a str,
}

struct Reader<'a> {
    /// Every line of the file, for the body of a block scalar (whose blank and `#` lines are
    /// text, not comments).
    raw: Vec<&'a str>,
    lines: Vec<Line<'a>>,
    next: usize,
}

impl<'a> Reader<'a> {
    /// The significant lines (not blank, not only a comment); `None` for what is never read
    /// here: a tab, a carriage return, a byte-order mark, a directive or document marker.
    fn new(source: &'a str) -> Option<Reader<'a>> {
        if source.starts_with('\u{feff}') || !printable(source) {
            return None;
        }
        let mut lines = Vec::with_capacity(source.len() / 24);
        let all: Vec<&'a str> = source.split('\n').collect();
        for (index, raw) in all.iter().copied().enumerate() {
            let text = raw.trim_start_matches(' ');
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            if raw.len() == text.len() && (text.starts_with("---") || text.starts_with("...")) {
                return None;
            }
            if text.starts_with('%') {
                return None;
            }
            lines.push(Line {
                number: u32::try_from(index + 1).ok()?,
                indent: raw.len() - text.len(),
                text,
            });
        }
        Some(Reader {
            raw: all,
            lines,
            next: 0,
        })
    }

    fn peek(&self) -> Option<Line<'a>> {
        self.lines.get(self.next).copied()
    }

    /// The whole file: one block mapping at column 1 and nothing after it.
    fn document(mut self) -> Option<Node<'a>> {
        let first = self.peek()?;
        if first.indent != 0 || is_item(first.text) {
            return None;
        }
        let root = self.block(0, 0)?;
        self.peek().is_none().then_some(root)
    }

    /// The block node whose first line is the next one, at exactly `indent`.
    fn block(&mut self, indent: usize, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let line = self.peek()?;
        if line.indent != indent {
            return None;
        }
        if is_item(line.text) {
            self.list(indent, depth)
        } else {
            self.mapping(indent, line.text, line, depth)
        }
    }

    /// A block list whose `-` sit at `indent`.
    fn list(&mut self, indent: usize, depth: usize) -> Option<Node<'a>> {
        let first = self.peek()?;
        let mut items = Vec::new();
        while let Some(line) = self.peek() {
            if line.indent < indent || (line.indent == indent && !is_item(line.text)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let rest = line.text[1..].trim_start_matches(' ');
            let column = indent + (line.text.len() - rest.len());
            if rest.is_empty() || rest.starts_with('#') {
                // `-` alone: the item is the block below it, indented more.
                self.next += 1;
                match self.peek() {
                    Some(below) if below.indent > indent => {
                        items.push(self.block(below.indent, depth + 1)?);
                    }
                    _ => items.push(node(Value::Null, line.number, column as u32 + 1)),
                }
                continue;
            }
            if is_item(rest) {
                return None;
            }
            if key_of(rest).is_some() {
                // A compact mapping: `- id: x`, its other keys below at the column of `id`.
                let inner = Line {
                    number: line.number,
                    indent: column,
                    text: rest,
                };
                items.push(self.mapping(column, rest, inner, depth + 1)?);
            } else {
                items.push(self.inline_value(rest, line.number, column + 1, indent, depth)?);
            }
        }
        Some(node(
            Value::List(items),
            first.number,
            first.indent as u32 + 1,
        ))
    }

    /// A block mapping whose keys sit at `indent`; its first key is in `text` (the rest of
    /// `first`, which may follow a `-`).
    fn mapping(
        &mut self,
        indent: usize,
        text: &'a str,
        first: Line<'a>,
        depth: usize,
    ) -> Option<Node<'a>> {
        let mut entries: Vec<(&'a str, Node<'a>)> = Vec::new();
        let mut current = Some((text, first));
        loop {
            let (text, line) = match current.take() {
                Some(found) => found,
                None => match self.peek() {
                    Some(line) if line.indent == indent && !is_item(line.text) => (line.text, line),
                    Some(line) if line.indent > indent => return None,
                    _ => break,
                },
            };
            let (key, rest) = key_of(text)?;
            if entries.iter().any(|(seen, _)| *seen == key) {
                return None;
            }
            self.next += 1;
            let value_text = rest.trim_start_matches(' ');
            let column = line.indent + (line.text.len() - value_text.len()) + 1;
            let value = if value_text.is_empty() || value_text.starts_with('#') {
                match self.peek() {
                    Some(below) if below.indent > indent => self.block(below.indent, depth + 1)?,
                    // A list may sit at its key's own indentation.
                    Some(below) if below.indent == indent && is_item(below.text) => {
                        self.list(indent, depth + 1)?
                    }
                    _ => node(Value::Null, line.number, column as u32),
                }
            } else if value_text.starts_with(['>', '|']) {
                self.block_scalar(value_text, line.number, column, indent)?
            } else {
                self.value_on_line(value_text, line.number, column, indent, depth)?
            };
            entries.push((key, value));
        }
        Some(node(
            Value::Map(entries),
            first.number,
            first.indent as u32 + 1,
        ))
    }

    /// A block scalar of a key at `indent` whose header (`>`, `>-`, `|` or `|-`, then maybe a
    /// comment) is on line `number`: its body is the lines below, all at one indentation
    /// deeper than the key, none blank inside, none more indented (those fold otherwise), and
    /// it ends at the first line less indented (blank lines before it are trailing ones,
    /// which the two chompings read drop). Anything else declines.
    fn block_scalar(
        &mut self,
        header: &'a str,
        number: u32,
        column: usize,
        indent: usize,
    ) -> Option<Node<'a>> {
        let (style, rest) = header.split_at(1);
        let (strip, rest) = match rest.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, rest),
        };
        let rest = rest.trim_start_matches(' ');
        if !(rest.is_empty()
            || (rest.starts_with('#') && header.len() > rest.len() + 1 + usize::from(strip)))
        {
            return None;
        }
        let spaces = |line: &str| line.len() - line.trim_start_matches(' ').len();
        let blank = |line: &str| line.trim_start_matches(' ').is_empty();
        let first = number as usize;
        let body_indent = spaces(self.raw.get(first)?);
        if blank(self.raw[first]) || body_indent <= indent {
            return None;
        }
        let mut body: Vec<&str> = Vec::new();
        let mut at = first;
        while let Some(line) = self.raw.get(at) {
            if blank(line) {
                // Blank lines inside the body fold into newlines: declined. Trailing ones
                // (before a line less indented, or the end) are dropped by both chompings.
                let next = self.raw[at..].iter().find(|line| !blank(line));
                if next.is_some_and(|line| spaces(line) >= body_indent) {
                    return None;
                }
                break;
            }
            let deep = spaces(line);
            if deep < body_indent {
                break;
            }
            if deep > body_indent {
                return None;
            }
            body.push(&line[body_indent..]);
            at += 1;
        }
        let last = u32::try_from(at).ok()?;
        while self.peek().is_some_and(|line| line.number <= last) {
            self.next += 1;
        }
        let mut text = body.join(if style == ">" { " " } else { "\n" });
        if !strip {
            text.push('\n');
        }
        Some(node(Value::Quoted(Cow::Owned(text)), number, column as u32))
    }

    /// A value written on its key's line; nothing may continue it on the lines below.
    fn value_on_line(
        &mut self,
        text: &'a str,
        number: u32,
        column: usize,
        indent: usize,
        depth: usize,
    ) -> Option<Node<'a>> {
        let value = inline(text, number, column, depth)?;
        if self.peek().is_some_and(|below| below.indent > indent) {
            return None;
        }
        Some(value)
    }

    /// An item's value written after its `-` (not a mapping).
    fn inline_value(
        &mut self,
        text: &'a str,
        number: u32,
        column: usize,
        indent: usize,
        depth: usize,
    ) -> Option<Node<'a>> {
        self.next += 1;
        self.value_on_line(text, number, column, indent, depth)
    }
}

fn node(value: Value<'_>, line: u32, column: u32) -> Node<'_> {
    Node {
        value,
        line,
        column,
    }
}

/// Whether `source` holds only what this reader reads as YAML does: no tab, no carriage
/// return and no other control character (serde-saphyr refuses the non-printable ones, and
/// a tab or a CR changes how a line is read), nothing YAML calls non-printable.
fn printable(source: &str) -> bool {
    let ascii_ok = source
        .bytes()
        .all(|b| b == b'\n' || (0x20..0x7f).contains(&b) || b >= 0x80);
    ascii_ok
        && (source.is_ascii()
            || source.chars().all(|c| {
                let c = u32::from(c);
                c < 0x80
                    || c == 0x85
                    || ((0xa0..=0xfffd).contains(&c) && !(0xd800..0xe000).contains(&c))
                    || c >= 0x10000
            }))
}

/// Whether a line's text is a list item: `-` then a blank or the end.
fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// `key: rest` or `key:` with a plain key of letters, digits, `_` and `-`; `None` for any
/// other line (a scalar, a quoted or complex key).
fn key_of(text: &str) -> Option<(&str, &str)> {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))?;
    let (key, rest) = text.split_at(end);
    let rest = rest.strip_prefix(':')?;
    let first = key.chars().next()?;
    if !(first.is_ascii_alphabetic() || first == '_') {
        return None;
    }
    (rest.is_empty() || rest.starts_with(' ')).then_some((key, rest))
}

/// A value that starts and ends on one line: a quoted or plain scalar, or a flow list or
/// mapping; what follows it may only be blanks and a comment.
fn inline<'a>(text: &'a str, line: u32, column: usize, depth: usize) -> Option<Node<'a>> {
    let mut cursor = Cursor {
        text,
        at: 0,
        line,
        column,
    };
    let value = match text.as_bytes().first()? {
        b'[' | b'{' => cursor.flow(depth)?,
        b'"' | b'\'' => cursor.quoted()?,
        _ => {
            let end = plain_end(text);
            let plain = text[..end].trim_end_matches(' ');
            cursor.at = plain.len();
            node(plain_value(plain)?, line, column as u32)
        }
    };
    let ended = cursor.at;
    cursor.blanks();
    let rest = &text[cursor.at..];
    // A comment needs a blank before its '#'.
    (rest.is_empty() || (rest.starts_with('#') && cursor.at > ended)).then_some(value)
}

/// Where a plain scalar on a block line ends: at ` #` or the end of the line. `None`-like
/// shapes (a `: ` inside, a leading indicator) are judged by [`plain_value`].
fn plain_end(text: &str) -> usize {
    text.find(" #").unwrap_or(text.len())
}

/// A plain scalar's value, or `None` for one that starts with an indicator this reader does
/// not read (`&`, `*`, `!`, `|`, `>`, `%`, `@`, a backquote, `?`, `-`+blank, `:`+blank) or
/// that holds `: ` (a mapping where none can be).
fn plain_value(text: &str) -> Option<Value<'_>> {
    let first = text.as_bytes().first()?;
    if matches!(
        first,
        b'&' | b'*'
            | b'!'
            | b'|'
            | b'>'
            | b'%'
            | b'@'
            | b'`'
            | b'?'
            | b','
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'#'
            | b'"'
            | b'\''
    ) {
        return None;
    }
    if (matches!(first, b'-' | b':') && (text.len() == 1 || text.as_bytes()[1] == b' '))
        || text.contains(": ")
        || text.ends_with(':')
    {
        return None;
    }
    if matches!(text, "~" | "null" | "Null" | "NULL") {
        return Some(Value::Null);
    }
    Some(Value::Plain(text))
}

/// A position in one line's text while a flow collection or quoted scalar is read.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
    line: u32,
    /// The column (1-based) of `text`'s first character.
    column: usize,
}

impl<'a> Cursor<'a> {
    fn here(&self) -> u32 {
        (self.column + self.text[..self.at].chars().count()) as u32
    }

    fn blanks(&mut self) {
        while self.text.as_bytes().get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.text.as_bytes().get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// `[a, 'b', [c]]` or `{k: v, k2: [x]}`, closed on this line.
    fn flow(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let (line, column) = (self.line, self.here());
        if self.eat(b'[') {
            let mut items = Vec::new();
            self.blanks();
            if self.eat(b']') {
                return Some(node(Value::List(items), line, column));
            }
            loop {
                self.blanks();
                items.push(self.flow_value(depth + 1)?);
                self.blanks();
                if self.eat(b']') {
                    return Some(node(Value::List(items), line, column));
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        }
        if self.eat(b'{') {
            let mut entries: Vec<(&'a str, Node<'a>)> = Vec::new();
            self.blanks();
            if self.eat(b'}') {
                return Some(node(Value::Map(entries), line, column));
            }
            loop {
                self.blanks();
                let rest = &self.text[self.at..];
                let (key, after) = key_of(rest)?;
                if entries.iter().any(|(seen, _)| *seen == key) {
                    return None;
                }
                self.at += rest.len() - after.len();
                self.blanks();
                entries.push((key, self.flow_value(depth + 1)?));
                self.blanks();
                if self.eat(b'}') {
                    return Some(node(Value::Map(entries), line, column));
                }
                if !self.eat(b',') {
                    return None;
                }
            }
        }
        None
    }

    /// One value inside a flow collection.
    fn flow_value(&mut self, depth: usize) -> Option<Node<'a>> {
        match self.text.as_bytes().get(self.at)? {
            b'[' | b'{' => self.flow(depth),
            b'"' | b'\'' => self.quoted(),
            _ => {
                let (line, column) = (self.line, self.here());
                let rest = &self.text[self.at..];
                let end = rest
                    .find([',', '[', ']', '{', '}', '#'])
                    .unwrap_or(rest.len());
                let plain = rest[..end].trim_end_matches(' ');
                if plain.is_empty() || plain.contains(':') {
                    return None;
                }
                self.at += plain.len();
                Some(node(plain_value(plain)?, line, column))
            }
        }
    }

    /// A quoted scalar closed on this line: `'…'` (`''` is a quote) or `"…"` with `\"` and
    /// `\\` as its only escapes.
    fn quoted(&mut self) -> Option<Node<'a>> {
        let (line, column) = (self.line, self.here());
        let quote = *self.text.as_bytes().get(self.at)?;
        let start = self.at + 1;
        let bytes = self.text.as_bytes();
        let mut owned: Option<String> = None;
        let mut i = start;
        let mut piece = start;
        loop {
            let byte = *bytes.get(i)?;
            if byte == quote {
                if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                    owned
                        .get_or_insert_with(String::new)
                        .push_str(&self.text[piece..=i]);
                    i += 2;
                    piece = i;
                    continue;
                }
                break;
            }
            if quote == b'"' && byte == b'\\' {
                let escaped = *bytes.get(i + 1)?;
                if !matches!(escaped, b'"' | b'\\') {
                    return None;
                }
                let text = owned.get_or_insert_with(String::new);
                text.push_str(&self.text[piece..i]);
                text.push(escaped as char);
                i += 2;
                piece = i;
                continue;
            }
            i += 1;
        }
        let value = match owned {
            Some(mut text) => {
                text.push_str(&self.text[piece..i]);
                Cow::Owned(text)
            }
            None => Cow::Borrowed(&self.text[start..i]),
        };
        self.at = i + 1;
        Some(node(Value::Quoted(value), line, column))
    }
}

/// What a plain scalar is when a type is asked of it: only the forms this reader is sure
/// serde-saphyr (YAML 1.2, strict booleans) reads the same; anything else is `Unsure`.
#[derive(Debug, PartialEq, Eq)]
enum Plain<'a> {
    Bool(bool),
    Int(u64),
    Text(&'a str),
    Unsure,
}

fn typed(text: &str) -> Plain<'_> {
    match text {
        "true" => return Plain::Bool(true),
        "false" => return Plain::Bool(false),
        _ => {}
    }
    let bytes = text.as_bytes();
    if bytes.iter().all(u8::is_ascii_digit) {
        if bytes.len() > 1 && bytes[0] == b'0' {
            return Plain::Unsure;
        }
        return text.parse().map_or(Plain::Unsure, Plain::Int);
    }
    // A duration as a schedule writes it (`45m`, `30s`, `1h`, `1d`): digits and one unit
    // letter are a string in every YAML schema.
    if let Some((unit, digits)) = bytes.split_last()
        && matches!(unit, b's' | b'm' | b'h' | b'd')
        && !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
    {
        return Plain::Text(text);
    }
    let lower = text.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "~"
    ) {
        return Plain::Unsure;
    }
    let first = bytes[0];
    let second = bytes.get(1).copied().unwrap_or(b' ');
    let sure = match first {
        b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'/' | b'$' => true,
        b'.' => !(second.is_ascii_digit() || matches!(second, b'i' | b'I' | b'n' | b'N')),
        b'~' => second == b'/',
        _ => first >= 0x80,
    };
    if sure {
        Plain::Text(text)
    } else {
        Plain::Unsure
    }
}

/// Why the quick reader gave up on a value: never shown, the caller reads the file again.
#[derive(Debug)]
struct Declined;

impl fmt::Display for Declined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

impl de::Error for Declined {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Declined
    }
}

/// serde-saphyr's `Spanned<T>` asks for this newtype, then reads a map: its private marker,
/// the value, and the two locations.
const SPANNED_NAME: &str = "__yaml_spanned";
const SPANNED_MARKER: &str = "__serde_saphyr_private_spanned";

/// A node as a serde deserializer.
struct NodeDe<'n, 'a>(&'n Node<'a>);

impl<'de> Deserializer<'de> for NodeDe<'_, '_> {
    type Error = Declined;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match &self.0.value {
            Value::Null => visitor.visit_unit(),
            Value::Quoted(text) => visitor.visit_str(text),
            Value::Plain(text) => match typed(text) {
                Plain::Bool(value) => visitor.visit_bool(value),
                Plain::Int(value) => visitor.visit_u64(value),
                Plain::Text(text) => visitor.visit_str(text),
                Plain::Unsure => Err(Declined),
            },
            Value::List(items) => visitor.visit_seq(ListAccess(items.iter())),
            Value::Map(entries) => visitor.visit_map(EntryAccess {
                entries: entries.iter(),
                value: None,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match self.0.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Declined> {
        if name == SPANNED_NAME {
            visitor.visit_newtype_struct(SpannedDe(self.0))
        } else {
            visitor.visit_newtype_struct(self)
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match &self.0.value {
            Value::Quoted(text) => visitor.visit_str(text),
            Value::Plain(text) => match typed(text) {
                Plain::Text(text) => visitor.visit_str(text),
                _ => Err(Declined),
            },
            _ => Err(Declined),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match self.0.value {
            Value::Plain(text) => match typed(text) {
                Plain::Bool(value) => visitor.visit_bool(value),
                _ => Err(Declined),
            },
            _ => Err(Declined),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match self.0.value {
            Value::Plain(text) => match typed(text) {
                Plain::Int(value) => visitor.visit_u64(value),
                _ => Err(Declined),
            },
            _ => Err(Declined),
        }
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match &self.0.value {
            Value::List(items) => visitor.visit_seq(ListAccess(items.iter())),
            _ => Err(Declined),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match &self.0.value {
            Value::Map(entries) => visitor.visit_map(EntryAccess {
                entries: entries.iter(),
                value: None,
            }),
            _ => Err(Declined),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Declined> {
        self.deserialize_map(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        visitor.visit_unit()
    }

    // Everything else (signed and floating numbers, chars, bytes, units, enums, tuples) is
    // not in a jobs file's raw form: declined.
    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u128 f32 f64 char bytes byte_buf unit unit_struct
        tuple tuple_struct enum
    }
}

/// The value of a `Spanned<T>`: the map serde-saphyr's `Spanned` reads.
struct SpannedDe<'n, 'a>(&'n Node<'a>);

impl<'de> Deserializer<'de> for SpannedDe<'_, '_> {
    type Error = Declined;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        visitor.visit_map(SpannedAccess {
            node: self.0,
            field: 0,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

struct SpannedAccess<'n, 'a> {
    node: &'n Node<'a>,
    field: usize,
}

impl<'de> MapAccess<'de> for SpannedAccess<'_, '_> {
    type Error = Declined;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Declined> {
        let key = match self.field {
            0 => SPANNED_MARKER,
            1 => "value",
            2 => "referenced",
            3 => "defined",
            _ => return Ok(None),
        };
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Declined> {
        self.field += 1;
        match self.field {
            1 => seed.deserialize(().into_deserializer()),
            2 => seed.deserialize(NodeDe(self.node)),
            _ => seed.deserialize(de::value::MapDeserializer::new(
                [
                    ("line", u64::from(self.node.line)),
                    ("column", u64::from(self.node.column)),
                ]
                .into_iter(),
            )),
        }
    }
}

struct ListAccess<'n, 'a>(std::slice::Iter<'n, Node<'a>>);

impl<'de> SeqAccess<'de> for ListAccess<'_, '_> {
    type Error = Declined;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Declined> {
        self.0
            .next()
            .map(|item| seed.deserialize(NodeDe(item)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct EntryAccess<'n, 'a> {
    entries: std::slice::Iter<'n, (&'a str, Node<'a>)>,
    value: Option<&'n Node<'a>>,
}

impl<'de> MapAccess<'de> for EntryAccess<'_, '_> {
    type Error = Declined;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Declined> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        // Through a node, not a bare string: a key may be read as `Spanned` (`restart.env`).
        let key = node(Value::Plain(key), value.line, value.column);
        seed.deserialize(NodeDe(&key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Declined> {
        let value = self.value.take().ok_or(Declined)?;
        seed.deserialize(NodeDe(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_saphyr::Spanned;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Small {
        name: Spanned<String>,
        count: Option<u64>,
        enabled: Option<bool>,
        list: Option<Vec<Spanned<String>>>,
        inner: Option<Box<Spanned<Inner>>>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        cmdline: String,
    }

    type At<T> = (T, u64, u64);

    fn at<T: Clone>(spanned: &Spanned<T>) -> At<T> {
        let place = spanned.referenced;
        (spanned.value.clone(), place.line(), place.column())
    }

    #[allow(clippy::type_complexity)]
    fn seen(
        small: &Small,
    ) -> (
        At<String>,
        Option<u64>,
        Option<bool>,
        Vec<At<String>>,
        Option<String>,
    ) {
        (
            at(&small.name),
            small.count,
            small.enabled,
            small.list.iter().flatten().map(at).collect(),
            small
                .inner
                .as_ref()
                .map(|inner| inner.value.cmdline.clone()),
        )
    }

    fn both(text: &str) -> (Option<Small>, Result<Small, serde_saphyr::Error>) {
        (read::<Small>(text), serde_saphyr::from_str::<Small>(text))
    }

    #[test]
    fn what_it_reads_serde_saphyr_reads_the_same_with_the_same_positions() {
        for text in [
            "name: a\ncount: 3\nenabled: true\nlist: [x, 'y''s', \"z \\\"q\\\"\"]\n",
            "name: 'job one'  # a comment\ninner: {cmdline: '^sleep 1\\.0$'}\n",
            "# head\n\nname: /data/x.log\nlist:\n- a\n- b\ninner:\n  cmdline: python3 x.py\n",
            "name: ~/x\nlist:\n  - ./a\n  - 日本\ncount: 0\n",
        ] {
            let (quick, full) = both(text);
            let full = full.expect("serde-saphyr reads it");
            let quick = quick.expect("read");
            // The same values at the same lines and columns (the spans' lengths are left out:
            // nothing worded from a quick read is ever shown).
            assert_eq!(seen(&quick), seen(&full), "{text}");
        }
    }

    #[test]
    fn it_declines_what_it_is_not_sure_of() {
        for text in [
            "name: yes\n",
            "name: 0x1F\n",
            "name: 12\n",
            "name: a\ncount: 1e3\n",
            "name: a\ncount: 010\n",
            "name: &a x\n",
            "name: *a\n",
            "name: !tag x\n",
            "name: two\n  lines\n",
            "name: a\nname: b\n",
            "name: a\nother: b\n",
            "name: \"tab\\tescape\"\n",
            "name: 'open\n",
            "name: a\nenabled: True\n",
            "name: a\n\tcount: 1\n",
            "---\nname: a\n",
            "name: [a,\n  b]\n",
            "name: a: b\n",
            "name: 'a'# not a comment\n",
            "name: \"bell \u{7}\"\n",
        ] {
            assert!(read::<Small>(text).is_none(), "declines {text:?}");
        }
    }

    #[test]
    fn plain_scalars_are_typed_only_when_sure() {
        assert_eq!(typed("true"), Plain::Bool(true));
        assert_eq!(typed("86400"), Plain::Int(86400));
        assert_eq!(typed("0"), Plain::Int(0));
        assert_eq!(typed("./state"), Plain::Text("./state"));
        for unsure in [
            "007",
            "+1",
            "-1",
            ".5",
            ".inf",
            "Yes",
            "OFF",
            "~",
            "1.5",
            "99999999999999999999",
        ] {
            assert_eq!(typed(unsure), Plain::Unsure, "{unsure}");
        }
    }
}
