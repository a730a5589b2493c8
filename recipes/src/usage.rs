//! Errors in what the user gave (exit code 2) and how an error's text is put together: what
//! every part of the binary reports through.

/// An error in what the user gave (an option, a file, a run directory): exit code 2.
#[derive(Debug)]
pub(crate) struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A usage error with this message.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    Usage(message.into()).into()
}

/// `names` joined by commas for a message, the first `shown` of them and how many more
/// (`a, b, c and 4 more`).
pub(crate) fn some_of(names: &[impl AsRef<str>], shown: usize) -> String {
    let listed: Vec<&str> = names.iter().take(shown).map(AsRef::as_ref).collect();
    match names.len().saturating_sub(shown) {
        0 => listed.join(", "),
        more => format!("{} and {more} more", listed.join(", ")),
    }
}

/// A clap error as a usage error, except `--help` / `--version`, which print and exit 0.
pub(crate) fn help_or_error(e: clap::Error) -> anyhow::Error {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        e.exit();
    }
    let text = e.render().to_string();
    let text = text
        .trim_end()
        .strip_prefix("error: ")
        .unwrap_or(text.trim_end());
    usage(text)
}

/// An error and its causes joined by ": ", each said once: a cause whose text its context
/// already holds (an I/O error a message quotes) is not repeated.
pub(crate) fn chain_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::some_of;

    #[test]
    fn a_long_list_is_shortened_with_its_count() {
        assert_eq!(some_of(&["a", "b"], 4), "a, b");
        assert_eq!(some_of(&["a", "b", "c", "d"], 4), "a, b, c, d");
        assert_eq!(
            some_of(&["a", "b", "c", "d", "e", "f"], 4),
            "a, b, c, d and 2 more"
        );
        assert_eq!(some_of(&[] as &[&str], 4), "");
    }
}
