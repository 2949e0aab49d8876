//! How the engine runs TypeScript (`SANDLOT_TYPESCRIPT_MODE`): stripped in the server and run by the JavaScript
//! runner (the default: no tsx needed, JavaScript's cost), or handed to the backend's TypeScript runner (tsx, deno,
//! bun: what stripping cannot give, such as type-checking-free `emitDecoratorMetadata` or JSX in `.ts`).

use std::fmt;
use std::str::FromStr;

use crate::{Error, Language};

/// Where TypeScript becomes JavaScript.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TypeScriptMode {
    /// In the server (`super::to_javascript`); the run is a JavaScript run. A live sandbox's cell too, unless it
    /// has module syntax (the node driver converts those with esbuild).
    #[default]
    Strip,
    /// By the backend's TypeScript runner (tsx when installed), as a TypeScript run.
    Runner,
}

impl TypeScriptMode {
    /// The language a backend runs for a fresh sandbox's run in `language`: JavaScript for TypeScript stripped in
    /// the server.
    pub fn backend_language(self, language: Language) -> Language {
        match (language, self) {
            (Language::TypeScript, TypeScriptMode::Strip) => Language::JavaScript,
            _ => language,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TypeScriptMode::Strip => "strip",
            TypeScriptMode::Runner => "runner",
        }
    }
}

impl fmt::Display for TypeScriptMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TypeScriptMode {
    type Err = Error;

    /// `strip`, or `runner` (also spelled `tsx`), case-insensitively.
    fn from_str(name: &str) -> Result<Self, Error> {
        match name.trim().to_ascii_lowercase().as_str() {
            "strip" => Ok(TypeScriptMode::Strip),
            "runner" | "tsx" => Ok(TypeScriptMode::Runner),
            _ => Err(Error::invalid("typescript mode", format!("unknown mode {name:?}; expected strip or runner"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_name() {
        assert_eq!("strip".parse::<TypeScriptMode>().unwrap(), TypeScriptMode::Strip);
        assert_eq!(" TSX ".parse::<TypeScriptMode>().unwrap(), TypeScriptMode::Runner);
        assert_eq!("runner".parse::<TypeScriptMode>().unwrap(), TypeScriptMode::Runner);
        assert_eq!(
            "esbuild".parse::<TypeScriptMode>().unwrap_err().to_string(),
            "invalid typescript mode: unknown mode \"esbuild\"; expected strip or runner"
        );
        assert_eq!(TypeScriptMode::default(), TypeScriptMode::Strip);
    }
}
