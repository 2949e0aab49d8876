//! The languages sandlot runs, with their aliases.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// A language a runner can execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    TypeScript,
    JavaScript,
    Bash,
}

impl Language {
    /// Every language, in the order they are listed to users.
    pub const ALL: [Language; 4] = [Language::Python, Language::TypeScript, Language::JavaScript, Language::Bash];

    /// The canonical name (`python`, `typescript`, `javascript`, `bash`).
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::TypeScript => "typescript",
            Language::JavaScript => "javascript",
            Language::Bash => "bash",
        }
    }

    /// The file extension the code is written with inside the sandbox.
    pub fn file_extension(self) -> &'static str {
        match self {
            Language::Python => "py",
            Language::TypeScript => "ts",
            Language::JavaScript => "js",
            Language::Bash => "sh",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Language {
    type Err = Error;

    /// Parses a name or alias, case-insensitively: `python`/`py`/`python3`, `typescript`/`ts`,
    /// `javascript`/`js`/`node`, `bash`/`shell`/`sh`.
    fn from_str(name: &str) -> Result<Self, Error> {
        match name.trim().to_ascii_lowercase().as_str() {
            "python" | "python3" | "py" => Ok(Language::Python),
            "typescript" | "ts" => Ok(Language::TypeScript),
            "javascript" | "js" | "node" | "nodejs" => Ok(Language::JavaScript),
            "bash" | "shell" | "sh" => Ok(Language::Bash),
            _ => Err(Error::invalid(
                "language",
                format!("unknown language {name:?}; expected one of python, typescript, javascript, bash"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_parse_to_their_language() {
        let cases = [
            ("python", Language::Python),
            ("PY", Language::Python),
            ("ts", Language::TypeScript),
            ("node", Language::JavaScript),
            ("javascript", Language::JavaScript),
            ("shell", Language::Bash),
            ("bash", Language::Bash),
        ];
        for (name, expected) in cases {
            assert_eq!(name.parse::<Language>().unwrap(), expected, "{name}");
        }
    }

    #[test]
    fn unknown_language_names_the_choices() {
        let err = "cobol".parse::<Language>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid language: unknown language \"cobol\"; expected one of python, typescript, javascript, bash"
        );
    }
}
