//! The README is a front door and the reference lives in `docs/`: every YAML example in them
//! loads as the text says (a jobs file or a fleet file through mihari's own loaders, anything
//! else as YAML), every link between them lands on a file and a heading that exist, the README
//! stays within 200 lines, and no page names the project's internal documents. The docs cannot
//! drift from the code without a test failing.
//!
//! An example the text says is refused is marked by an HTML comment on the line before its
//! fence, `<!-- refused: WORDS -->`: it must be refused, with WORDS in the error.

use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("a docs folder")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 8, "the reference lives in docs/: {docs:?}");
    pages.extend(docs);
    pages
}

/// An example: its page, the line its fence opens on, its text, and the words it must be
/// refused with, when the page marks it so.
struct Example {
    page: PathBuf,
    line: usize,
    text: String,
    refused: Option<String>,
}

fn yaml_examples(page: &Path) -> Vec<Example> {
    let text = fs::read_to_string(page).expect("the page reads");
    let lines: Vec<&str> = text.lines().collect();
    let mut examples = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let fence = lines[at].trim_start();
        if fence == "```yaml" || fence == "```yml" {
            let refused = at
                .checked_sub(1)
                .and_then(|before| lines[before].trim().strip_prefix("<!-- refused:"))
                .map(|rest| rest.trim_end_matches("-->").trim().to_string());
            let start = at;
            at += 1;
            let mut body = String::new();
            while at < lines.len() && lines[at].trim_start() != "```" {
                body.push_str(lines[at]);
                body.push('\n');
                at += 1;
            }
            examples.push(Example {
                page: page.to_path_buf(),
                line: start + 1,
                text: body,
                refused,
            });
        }
        at += 1;
    }
    examples
}

/// Whether `text` has `key:` at its top level.
fn top_level(text: &str, key: &str) -> bool {
    text.lines()
        .any(|line| line.starts_with(&format!("{key}:")))
}

#[test]
fn every_yaml_example_in_the_readme_and_docs_loads_as_the_text_says() {
    let mut seen = 0;
    for page in pages() {
        for example in yaml_examples(&page) {
            seen += 1;
            let at = format!("{}:{}", example.page.display(), example.line);
            let path = Path::new("/etc/mihari/jobs.yaml");
            let outcome: Result<(), String> = if top_level(&example.text, "hosts") {
                mihari::config::load_fleet_str(&example.text, Path::new("/etc/mihari/fleet.yaml"))
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            } else if [
                "rule_files",
                "alerting",
                "route",
                "receivers",
                "groups",
                "global",
            ]
            .iter()
            .any(|key| top_level(&example.text, key))
            {
                // Prometheus' and Alertmanager's own files: theirs to load (the shipped ones are
                // checked by promtool and amtool); here, that they are YAML at all.
                serde_saphyr::from_str::<serde_json::Value>(&example.text)
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            } else {
                // A jobs file, or the part of one it shows: a job's stanza, or the settings.
                let mut file = example.text.clone();
                if file.trim_start().starts_with("- id:") || file.starts_with("  - ") {
                    file = format!("jobs:\n{file}");
                }
                if !top_level(&file, "jobs") {
                    file.push_str("jobs: []\n");
                }
                mihari::config::load_str(&file, path)
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            };
            match (&example.refused, outcome) {
                (None, Ok(())) => {}
                (None, Err(error)) => panic!("{at}: the example does not load: {error}"),
                (Some(words), Ok(())) => panic!("{at}: the text says it is refused ({words})"),
                (Some(words), Err(error)) => assert!(
                    error.contains(words.as_str()),
                    "{at}: refused, but not with the words the text says ('{words}'): {error}"
                ),
            }
        }
    }
    assert!(seen >= 5, "only {seen} YAML examples found");
}

#[test]
fn the_readme_is_a_front_door_of_at_most_200_lines() {
    let readme = fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: the reference belongs in docs/"
    );
    for command in ["cargo run --release -- demo", "cargo test --locked"] {
        assert!(readme.contains(command), "the README shows '{command}'");
    }
}

/// The anchor GitHub gives a heading: lower case, punctuation but '-' and '_' dropped, spaces
/// as '-'.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> Vec<String> {
    let text = fs::read_to_string(page).expect("the page reads");
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn every_link_between_the_pages_lands_on_a_page_and_a_heading() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").expect("regex");
    for page in pages() {
        let text = fs::read_to_string(&page).expect("the page reads");
        for found in link.captures_iter(&text) {
            let target = &found[1];
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target, None),
            };
            let landing = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a folder").join(file)
            };
            assert!(
                landing.exists(),
                "{}: the link '{target}' names no file",
                page.display()
            );
            if let Some(fragment) =
                fragment.filter(|_| landing.extension().is_some_and(|e| e == "md"))
            {
                assert!(
                    anchors(&landing).iter().any(|a| a == fragment),
                    "{}: the link '{target}' names no heading of {}",
                    page.display(),
                    landing.display()
                );
            }
        }
    }
}

#[test]
fn no_page_names_the_projects_internal_documents() {
    let internal =
        regex::Regex::new(r"\bSPEC\b|§\s*\d|\bseed\s*0\d\d\b|\bseed303\b").expect("regex");
    for page in pages() {
        let text = fs::read_to_string(&page).expect("the page reads");
        for (number, line) in text.lines().enumerate() {
            assert!(
                !internal.is_match(line),
                "{}:{}: names an internal document: {line}",
                page.display(),
                number + 1
            );
        }
    }
}
