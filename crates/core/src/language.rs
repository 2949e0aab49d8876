//! The languages sandlot runs, with their aliases.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// A language a runner can execute.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
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

    /// Every name the parser accepts (compared after trimming and lowercasing), canonical names first. The MCP
    /// tool's `language` schema lists exactly these, so schema and parser cannot drift.
    pub const NAMES: [(&'static str, Language); 12] = [
        ("python", Language::Python),
        ("typescript", Language::TypeScript),
        ("javascript", Language::JavaScript),
        ("bash", Language::Bash),
        ("python3", Language::Python),
        ("py", Language::Python),
        ("ts", Language::TypeScript),
        ("js", Language::JavaScript),
        ("node", Language::JavaScript),
        ("nodejs", Language::JavaScript),
        ("shell", Language::Bash),
        ("sh", Language::Bash),
    ];

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

    /// Parses a name or alias of [`Language::NAMES`], case-insensitively: `python`/`py`/`python3`,
    /// `typescript`/`ts`, `javascript`/`js`/`node`/`nodejs`, `bash`/`shell`/`sh`.
    fn from_str(name: &str) -> Result<Self, Error> {
        let lowered = name.trim().to_ascii_lowercase();
        match Language::NAMES.iter().find(|(alias, _)| *alias == lowered) {
            Some((_, language)) => Ok(*language),
            None => Err(Error::invalid(
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
