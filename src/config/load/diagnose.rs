//! Turning a position in the jobs file into a refusal an operator can act on.
//!
//! This module owns the wording of YAML-level refusals (syntax, types, unknown and
//! repeated keys, yes/no booleans, alias bombs) and the shape every refusal shares: the
//! offending text in 'single quotes', what would be accepted, and a two-line snippet (the
//! source line and a caret). It translates serde-saphyr's errors into our own words and
//! never shows the library's own "line N column M" prefix or snippet. Every piece of the
//! file it quotes passes through [`inert`]: a jobs file must not be able to drive the
//! terminal that shows its refusal. It must not decide what is valid: `validate` does.

use std::path::Path;

use serde_saphyr::{Error as YamlError, Location, MessageFormatter, UserMessageFormatter};

use super::ConfigError;
use crate::core::text::inert;

/// Longest piece of the file quoted in a message; longer text is cut with '…'.
const QUOTE_MAX_CHARS: usize = 60;
/// Widest source line shown in a snippet; longer lines show a window around the caret.
const SNIPPET_MAX_CHARS: usize = 100;

/// A place in the file: 1-based line and column (in characters), and how many characters
/// the offending text spans (0 when unknown: the quote then runs to the end of the line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pos {
    pub line: u64,
    pub column: u64,
    pub len: u64,
}

impl Pos {
    /// The start of the file: where refusals about the file as a whole point.
    pub const START: Pos = Pos {
        line: 1,
        column: 1,
        len: 0,
    };

    /// `None` for the library's "unknown" location (line 0).
    pub fn from_location(location: Location) -> Option<Pos> {
        (location.line() > 0 && location.column() > 0).then(|| Pos {
            line: location.line(),
            column: location.column(),
            len: location.span().len(),
        })
    }

    /// Where a [`serde_saphyr::Spanned`] value was used (an alias's use site, not its anchor).
    pub fn of<T>(spanned: &serde_saphyr::Spanned<T>) -> Pos {
        Pos::from_location(spanned.referenced).unwrap_or(Pos::START)
    }
}

/// The jobs file's text and name, for quoting and pointing into it.
pub(super) struct Source<'a> {
    pub text: &'a str,
    pub path: &'a Path,
}

impl Source<'_> {
    /// Line `line` (1-based) without its line break.
    fn line(&self, line: u64) -> Option<&str> {
        let index = usize::try_from(line.checked_sub(1)?).ok()?;
        // YAML ends a line at "\r\n", "\n" or a lone "\r": count lines the same way.
        let mut rest: &str = self.text;
        for _ in 0..index {
            let end = rest.find(['\n', '\r'])?;
            let skip = if rest[end..].starts_with("\r\n") {
                2
            } else {
                1
            };
            rest = &rest[end + skip..];
        }
        let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
        Some(&rest[..end])
    }

    /// The raw text at `pos`: its span on that line, or, for a span of unknown length,
    /// the rest of the line without a trailing comment. Never crosses a line break.
    pub fn excerpt(&self, pos: Pos) -> String {
        let Some(line) = self.line(pos.line) else {
            return String::new();
        };
        let skip = usize::try_from(pos.column.saturating_sub(1)).unwrap_or(usize::MAX);
        let rest: String = line.chars().skip(skip).collect();
        if pos.len > 0 {
            let take = usize::try_from(pos.len).unwrap_or(usize::MAX);
            return rest
                .chars()
                .take(take)
                .collect::<String>()
                .trim_end()
                .to_owned();
        }
        let without_comment = match rest.find(" #") {
            Some(at) => &rest[..at],
            None if rest.starts_with('#') => "",
            None => &rest,
        };
        without_comment.trim().to_owned()
    }

    /// The text at `pos`, made inert, cut to a readable length, in 'single quotes'.
    pub fn quote_at(&self, pos: Pos) -> String {
        quote(&self.excerpt(pos))
    }

    /// The two-line snippet under a refusal: the source line and a caret under `pos`.
    fn snippet(&self, pos: Pos) -> Option<String> {
        let line = self.line(pos.line)?;
        let skip = usize::try_from(pos.column.saturating_sub(1)).ok()?;
        let before: String = line.chars().take(skip).collect();
        let at: String = line.chars().skip(skip).collect();
        let before = inert(&before);
        let at = inert(&at);
        let before_width = before.chars().count();
        let caret_width = if pos.len > 0 {
            let span: String = line
                .chars()
                .skip(skip)
                .take(usize::try_from(pos.len).ok()?)
                .collect();
            inert(span.trim_end()).chars().count().clamp(1, 40)
        } else {
            1
        };
        // Keep long lines readable: show a window that still contains the caret.
        let shown_from = before_width.saturating_sub(SNIPPET_MAX_CHARS / 2);
        let whole: String = format!("{before}{at}");
        let mut shown: String = whole
            .chars()
            .skip(shown_from)
            .take(SNIPPET_MAX_CHARS)
            .collect();
        if shown_from > 0 {
            shown.insert(0, '…');
        }
        if whole.chars().count() > shown_from + SNIPPET_MAX_CHARS {
            shown.push('…');
        }
        let caret_at = before_width - shown_from + usize::from(shown_from > 0);
        let number = pos.line.to_string();
        let gutter = " ".repeat(number.len());
        Some(format!(
            "{number} | {}\n{gutter} | {}{}",
            shown.trim_end(),
            " ".repeat(caret_at),
            "^".repeat(caret_width)
        ))
    }

    /// A refusal at `pos`: the message, then the snippet on two more lines.
    pub fn refuse(&self, pos: Pos, message: impl Into<String>) -> ConfigError {
        let mut message = message.into();
        if let Some(snippet) = self.snippet(pos) {
            message.push('\n');
            message.push_str(&snippet);
        }
        ConfigError {
            path: self.path.to_path_buf(),
            position: Some((pos.line, pos.column)),
            message,
        }
    }

    /// A refusal about the file as a whole, at 1:1 and without a snippet.
    pub fn refuse_file(&self, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: self.path.to_path_buf(),
            position: Some((1, 1)),
            message: message.into(),
        }
    }

    /// Our wording for an error serde-saphyr reported while reading the YAML.
    pub fn yaml_error(&self, err: &YamlError) -> ConfigError {
        let pos = err.location().and_then(Pos::from_location);
        let quoted = pos.map(|p| self.quote_at(p)).unwrap_or_else(|| quote(""));
        let message = describe(original(err), &quoted, pos.map(|p| self.key_before(p)));
        match pos {
            Some(pos) => self.refuse(pos, message),
            None => ConfigError {
                path: self.path.to_path_buf(),
                position: None,
                message,
            },
        }
    }

    /// The key whose value starts at `pos`, when it sits on the same line (`key: value` or
    /// `{ key: value }`), so a type error can say which setting it is about.
    fn key_before(&self, pos: Pos) -> Option<String> {
        let line = self.line(pos.line)?;
        let skip = usize::try_from(pos.column.saturating_sub(1)).ok()?;
        let before: String = line.chars().take(skip).collect();
        let before = before.trim_end().strip_suffix(':')?;
        let key: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<char>>()
            .into_iter()
            .rev()
            .collect();
        (!key.is_empty()).then_some(key)
    }
}

/// `text` made inert, cut to [`QUOTE_MAX_CHARS`], in 'single quotes'.
pub(super) fn quote(text: &str) -> String {
    let safe = inert(text);
    if safe.chars().count() > QUOTE_MAX_CHARS {
        let cut: String = safe.chars().take(QUOTE_MAX_CHARS).collect();
        format!("'{cut}…'")
    } else {
        format!("'{safe}'")
    }
}

/// The error under the library's wrappers (source snippet, alias use site).
fn original(err: &YamlError) -> &YamlError {
    match err.without_snippet() {
        YamlError::AliasError { error, .. } => original(error),
        other => other,
    }
}

/// Which mapping a list of accepted keys belongs to, in the words of SPEC §2.
fn mapping_name(accepted: &[&str]) -> &'static str {
    let has = |key: &str| accepted.contains(&key);
    if has("jobs") {
        "at the top level"
    } else if has("digest_at") {
        "in settings"
    } else if has("should_run_when") {
        "in a job"
    } else if has("routes") {
        "in restart"
    } else if has("every_sec") {
        "in a check"
    } else if has("time_column") {
        "in progress_table"
    } else if has("queue_sec") {
        "in timeouts"
    } else if has("preset") {
        "in log_progress"
    } else if has("cmdline") {
        "in process"
    } else if has("grace") {
        "in schedule"
    } else if accepted == ["name", "command"] {
        "in a route"
    } else {
        "here"
    }
}

/// The accepted key closest to a misspelt one, when it is close enough to be a typo.
fn closest<'k>(typed: &str, accepted: &[&'k str]) -> Option<&'k str> {
    let limit = (typed.chars().count() / 3).clamp(1, 3);
    accepted
        .iter()
        .map(|key| (edit_distance(typed, key), *key))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, key)| key)
}

/// Levenshtein distance over characters; both inputs are short keys.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(ca != *cb);
            let insert = current[j] + 1;
            let delete = previous[j + 1] + 1;
            current.push(substitute.min(insert).min(delete));
        }
        previous = current;
    }
    previous[b.len()]
}

/// "a whole number from 0 to N" for the integer types the raw structs use.
fn number_range(ty: &str) -> Option<String> {
    let max = match ty {
        "u8" => u64::from(u8::MAX),
        "u16" => u64::from(u16::MAX),
        "u32" => u64::from(u32::MAX),
        "u64" => return Some("a whole number, 0 or more".to_owned()),
        _ => return None,
    };
    Some(format!("a whole number from 0 to {max}"))
}

/// The library's "expected ..." phrases in an operator's words.
fn expected_in_words(expected: &str) -> String {
    match expected {
        "mapping start" => "a mapping of keys to values (key: value)".to_owned(),
        "sequence start" => "a list ([a, b] or lines starting with '- ')".to_owned(),
        "string scalar" => "text".to_owned(),
        other => inert(other),
    }
}

/// The message for one library error. `quoted` is the offending text, already quoted;
/// `key` the key the value belongs to, when it could be read off the line.
fn describe(err: &YamlError, quoted: &str, key: Option<Option<String>>) -> String {
    let key = key.flatten();
    let for_key = key
        .as_deref()
        .map(|k| format!(" for '{k}'"))
        .unwrap_or_default();
    match err {
        YamlError::SerdeUnknownField {
            field, expected, ..
        } => {
            let mut message = format!("unknown key {} {}", quote(field), mapping_name(expected));
            if let Some(near) = closest(field, expected) {
                message.push_str(&format!(" (did you mean '{near}'?)"));
            }
            message.push_str(&format!("; accepted keys: {}", expected.join(", ")));
            message
        }
        YamlError::InvalidBooleanStrict { .. } => format!(
            "{quoted} is not a boolean{for_key}: write true or false \
             (yes/no/on/off are refused: YAML versions read them differently)"
        ),
        YamlError::InvalidScalar { ty, .. } => match number_range(ty) {
            Some(range) => format!("{quoted} is not accepted{for_key}: expected {range}"),
            None => format!("{quoted} is not accepted{for_key}: expected a value of type {ty}"),
        },
        YamlError::SerdeInvalidType {
            unexpected,
            expected,
            ..
        }
        | YamlError::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!(
            "{quoted} is not accepted{for_key}: expected {}, found {}",
            inert(expected),
            inert(unexpected)
        ),
        YamlError::Unexpected { expected, .. } => format!(
            "{quoted} is not accepted{for_key}: expected {}",
            expected_in_words(expected)
        ),
        YamlError::NullIntoString { .. } => {
            format!(
                "{quoted} has no value{for_key}: expected text; write a value or remove the key"
            )
        }
        YamlError::DuplicateMappingKey { key: repeated, .. } => {
            let shown = repeated
                .as_deref()
                .map(quote)
                .unwrap_or_else(|| quoted.to_owned());
            format!("key {shown} appears twice in the same mapping: keep one of them")
        }
        YamlError::SerdeMissingField { field, .. } => {
            format!("{quoted}: key '{field}' is missing here; add it")
        }
        YamlError::Message { msg, .. } => inert(msg),
        YamlError::AliasReplayLimitExceeded { .. }
        | YamlError::AliasExpansionLimitExceeded { .. }
        | YamlError::AliasReplayStackDepthExceeded { .. }
        | YamlError::AliasReplayCounterOverflow { .. } => format!(
            "YAML aliases expand beyond what a jobs file needs (at {quoted}: {}): refused as a \
             possible alias bomb; write the values out, or alias fewer and smaller nodes",
            alias_limit_words(err)
        ),
        YamlError::Budget { breach, .. } if by_aliases(breach) => format!(
            "YAML aliases expand beyond what a jobs file needs (at {quoted}: {}): refused as a \
             possible alias bomb; write the values out, or alias fewer and smaller nodes",
            breach_words(breach)
        ),
        YamlError::Budget { breach, .. } => format!(
            "refused at {quoted}: {}; a jobs file never needs this: split or simplify it",
            breach_words(breach)
        ),
        YamlError::UnknownAnchor { .. } => {
            format!("alias {quoted} names no anchor defined before it: define '&name' first")
        }
        YamlError::RecursiveReferencesRequireWeakTypes { .. } => format!(
            "alias {quoted} refers to a value that contains it: a jobs file holds no \
             recursive values; write the value out"
        ),
        YamlError::MultipleDocuments { .. } => format!(
            "a second YAML document starts at {quoted}: a jobs file is one document; \
             remove the '---' and merge the two"
        ),
        YamlError::InvalidUtf8Input => "the file is not UTF-8 text: save it as UTF-8".to_owned(),
        YamlError::ExternalMessage { .. } | YamlError::Eof { .. } => format!(
            "not valid YAML at {quoted}: {}; check the indentation, quotes and brackets",
            library_words(err).unwrap_or_else(|| "the YAML cannot be read here".to_owned())
        ),
        YamlError::UnexpectedSequenceEnd { .. }
        | YamlError::UnexpectedMappingEnd { .. }
        | YamlError::UnexpectedContainerEndWhileSkippingNode { .. }
        | YamlError::UnexpectedContainerEndWhileReadingKeyNode { .. }
        | YamlError::ContainerEndMismatch { .. }
        | YamlError::ExpectedMappingEndAfterEnumVariantValue { .. } => format!(
            "not valid YAML at {quoted}: a list or mapping ends where a value was expected; \
             check the indentation and brackets"
        ),
        YamlError::FoldedBlockScalarMustIndentContent { .. } => format!(
            "not valid YAML at {quoted}: the lines of a folded block ('>') must be indented \
             below its key"
        ),
        YamlError::IndentationError { actual, .. } => format!(
            "not valid YAML at {quoted}: an indentation of {actual} spaces is not accepted \
             here; indent nested keys by two spaces"
        ),
        YamlError::MergeValueNotMapOrSeqOfMaps { .. } => format!(
            "{quoted} cannot be merged: a merge key '<<' takes a mapping (<<: *defaults) or a \
             list of mappings (<<: [*a, *b])"
        ),
        YamlError::MergeKeyNotAllowed { .. } => {
            format!("merge key {quoted} is not accepted here: write the keys out")
        }
        YamlError::InvalidBinaryBase64 { .. } | YamlError::BinaryNotUtf8 { .. } => format!(
            "{quoted} is tagged '!!binary'{for_key}: a jobs file holds text; remove the tag"
        ),
        YamlError::TaggedScalarCannotDeserializeIntoString { .. } => format!(
            "{quoted} carries a YAML tag{for_key} that text cannot take: remove the tag (the \
             '!...' before the value)"
        ),
        YamlError::UnsupportedTag { tag, .. } | YamlError::TaggedStructFieldName { tag, .. } => {
            format!(
                "the YAML tag {} at {quoted} is not accepted: remove it",
                quote(tag)
            )
        }
        YamlError::InvalidCharNull { .. } | YamlError::InvalidCharNotSingleScalar { .. } => {
            format!("{quoted} is not accepted{for_key}: expected a single character")
        }
        YamlError::BytesNotSupportedMissingBinaryTag { .. } => {
            format!("{quoted} is not accepted{for_key}: expected text")
        }
        YamlError::UnexpectedValueForUnit { .. }
        | YamlError::ExpectedEmptyMappingForUnitStruct { .. }
        | YamlError::UnexpectedValueForUnitEnumVariant { .. } => {
            format!("{quoted} is not accepted{for_key}: this key takes no value")
        }
        YamlError::SerdeUnknownVariant { expected, .. } => format!(
            "{quoted} is not accepted{for_key}: expected one of {}",
            expected.join(", ")
        ),
        YamlError::ExpectedStringKeyForExternallyTaggedEnum { .. }
        | YamlError::ExternallyTaggedEnumExpectedScalarOrMapping { .. }
        | YamlError::TaggedEnumMismatch { .. }
        | YamlError::SerdeVariantId { .. } => {
            format!("{quoted} is not accepted{for_key}: expected one of the names listed for it")
        }
        YamlError::SerdeInvalidLength { len, expected, .. } => format!(
            "{quoted} is not accepted{for_key}: expected {}, found {len} item{}",
            inert(expected),
            if *len == 1 { "" } else { "s" }
        ),
        YamlError::NonFiniteFloat { .. } => {
            format!("{quoted} is not accepted{for_key}: expected a finite number")
        }
        YamlError::QuotingRequired { .. } => {
            format!("{quoted} must be quoted{for_key}: write it in quotes so it is read as text")
        }
        YamlError::CyclicInclude { .. }
        | YamlError::UnsupportedIncludeForm { .. }
        | YamlError::ResolverError { .. } => format!(
            "{quoted}: '!include' is not accepted in a jobs file: write its jobs into this file"
        ),
        YamlError::UnresolvedProperty { .. }
        | YamlError::InvalidPropertyName { .. }
        | YamlError::PropertyRequiredButUnset { .. }
        | YamlError::PropertyRequiredButEmpty { .. } => {
            format!("{quoted}: '${{...}}' is not expanded in a jobs file: write the value out")
        }
        YamlError::IOError { cause } => format!(
            "cannot read the jobs file ({}): check the path, or pass --config",
            inert(&cause.to_string())
        ),
        YamlError::InvalidOptions { .. }
        | YamlError::InternalSeedReusedForMapKey { .. }
        | YamlError::ValueRequestedBeforeKey { .. }
        | YamlError::InternalDepthUnderflow { .. }
        | YamlError::InternalRecursionStackEmpty { .. }
        | YamlError::CannotBorrowTransformedString { .. }
        | YamlError::HookError { .. } => format!(
            "the YAML reader failed inside at {quoted} (a fault of the reader, not of the \
             file as far as mihari can tell): simplify the lines there, and report it"
        ),
        other => format!(
            "{quoted} is not accepted{for_key}: {}",
            library_words(other).unwrap_or_else(|| {
                "the YAML here cannot be read as a jobs file; check the indentation, quotes \
                 and brackets"
                    .to_owned()
            })
        ),
    }
}

/// The library's own message, when it is plain words: one that shows a value of its own
/// (`{ ... }`, `name=value`) is never shown to the operator.
fn library_words(err: &YamlError) -> Option<String> {
    let text = inert(&UserMessageFormatter.format_message(err));
    let plain = !text.is_empty()
        && !text.contains(['{', '}', '='])
        && !text.contains("budget")
        && !text.contains("Error");
    plain.then_some(text)
}

/// An alias limit in words, with mihari's numbers.
fn alias_limit_words(err: &YamlError) -> String {
    match err {
        YamlError::AliasReplayLimitExceeded { .. }
        | YamlError::AliasReplayCounterOverflow { .. } => {
            format!(
                "they would replay more than {} YAML events in all",
                thousands(super::MAX_REPLAYED_EVENTS)
            )
        }
        YamlError::AliasExpansionLimitExceeded { .. } => format!(
            "one anchor would be expanded more than {} times",
            thousands(super::MAX_ALIASES)
        ),
        _ => format!(
            "aliases would nest inside aliases more than {} deep",
            super::MAX_REPLAY_DEPTH
        ),
    }
}

/// Whether a budget breach is the work of aliases (what they repeat, or how many there are).
fn by_aliases(breach: &serde_saphyr::budget::BudgetBreach) -> bool {
    use serde_saphyr::budget::BudgetBreach as B;
    matches!(
        breach,
        B::Aliases { .. }
            | B::Anchors { .. }
            | B::MergeKeys { .. }
            | B::ScalarBytes { .. }
            | B::AliasAnchorRatio { .. }
            | B::RecordedAnchorEvents { .. }
            | B::RecordedAnchorBytes { .. }
    )
}

/// What a budget breach means, in words, with mihari's numbers: never the library's value.
fn breach_words(breach: &serde_saphyr::budget::BudgetBreach) -> String {
    use serde_saphyr::budget::BudgetBreach as B;
    let file_limit = format!("{} MiB", super::MAX_FILE_BYTES / 1024 / 1024);
    match breach {
        B::Events { .. } | B::Nodes { .. } => format!(
            "it holds more YAML values than any file of its size could, even with aliases \
             repeating some (a jobs file is at most {file_limit})"
        ),
        B::Aliases { .. } => format!(
            "it uses more than {} aliases ('*name')",
            thousands(super::MAX_ALIASES)
        ),
        B::Anchors { .. } => format!(
            "it defines more than {} anchors ('&name')",
            thousands(super::MAX_ALIASES)
        ),
        B::MergeKeys { .. } => format!(
            "it uses more than {} merge keys ('<<')",
            thousands(super::MAX_ALIASES)
        ),
        B::Depth { .. } => format!(
            "lists and mappings nest more than {} levels deep",
            super::MAX_DEPTH
        ),
        B::ScalarBytes { .. } => format!(
            "they would repeat more than {} MiB of text beyond what the file holds",
            super::MAX_REPLAYED_SCALAR_BYTES / 1024 / 1024
        ),
        B::AliasAnchorRatio { .. } => "it uses far more aliases than anchors".to_owned(),
        B::Documents { .. } => "it holds many YAML documents; a jobs file is one".to_owned(),
        B::InputBytes { .. } => format!("it is larger than {file_limit}"),
        B::InclusionDepth { .. } => "'!include' is not accepted in a jobs file".to_owned(),
        B::SequenceUnbalanced => {
            "a list or mapping closes that never opened: the file is cut short or malformed"
                .to_owned()
        }
        B::RecordedAnchorEvents { .. } | B::RecordedAnchorBytes { .. } => format!(
            "its anchors would hold more than {} YAML events, aliases inside anchors \
             multiplying them",
            thousands(super::MAX_ANCHORED_EVENTS)
        ),
        B::PropertyExpansionDepth { .. } | B::PropertyInterpolationWork { .. } => {
            "'${...}' is not expanded in a jobs file".to_owned()
        }
        _ => "it goes beyond what a jobs file needs".to_owned(),
    }
}

/// `n` with a comma every three digits: 1,000,000.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source<'_> {
        Source {
            text,
            path: Path::new("jobs.yaml"),
        }
    }

    #[test]
    fn excerpt_takes_the_span_or_the_rest_of_the_line_without_comment() {
        let src = source("a: 1\n  stall_sec: -5   # five\n");
        assert_eq!(
            src.excerpt(Pos {
                line: 2,
                column: 14,
                len: 2
            }),
            "-5"
        );
        assert_eq!(
            src.excerpt(Pos {
                line: 2,
                column: 3,
                len: 0
            }),
            "stall_sec: -5"
        );
        assert_eq!(
            src.excerpt(Pos {
                line: 9,
                column: 1,
                len: 3
            }),
            ""
        );
    }

    #[test]
    fn snippet_puts_the_caret_under_the_value() {
        let src = source("jobs:\n  - stall_sec: -5\n");
        let err = src.refuse(
            Pos {
                line: 2,
                column: 16,
                len: 2,
            },
            "bad",
        );
        assert_eq!(
            err.message,
            "bad\n2 |   - stall_sec: -5\n  |                ^^"
        );
    }

    #[test]
    fn long_lines_show_a_window_around_the_caret() {
        let text = format!("command: [{}\"x\", bad]\n", "\"a\", ".repeat(60));
        let src = source(&text);
        let column = u64::try_from(text.find("bad").expect("bad") + 1).expect("small");
        let err = src.refuse(
            Pos {
                line: 1,
                column,
                len: 3,
            },
            "bad",
        );
        let lines: Vec<&str> = err.message.lines().collect();
        assert!(
            lines[1].chars().count() <= SNIPPET_MAX_CHARS + 8,
            "{}",
            lines[1]
        );
        let caret = lines[2].chars().position(|c| c == '^').expect("caret");
        let under: String = lines[1].chars().skip(caret).take(3).collect();
        assert_eq!(under, "bad", "{}", err.message);
    }

    #[test]
    fn quoted_text_cannot_drive_the_terminal() {
        let src = source("name: \"\u{1b}]0;pwned\u{7}x\"\n");
        let quoted = src.quote_at(Pos {
            line: 1,
            column: 7,
            len: 0,
        });
        assert!(crate::core::text::is_inert(&quoted));
    }

    #[test]
    fn misspelt_keys_get_a_suggestion() {
        assert_eq!(
            closest("stal_sec", &["stall_sec", "log"]),
            Some("stall_sec")
        );
        assert_eq!(closest("zzz", &["stall_sec", "log"]), None);
    }
}
