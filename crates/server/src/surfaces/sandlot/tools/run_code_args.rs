//! The arguments of `sandbox.run_code` as one Rust type. The tool's `inputSchema` is derived from it with schemars
//! (as rmcp's typed tools are) and a call's arguments are parsed into it with serde, so the schema a model reads and
//! the parser that judges its call cannot drift. Every bad value is refused naming its field.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use rmcp::ErrorData as McpError;
use rmcp::model::JsonObject;
use sandlot_core::Language;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::kit::rpc_errors::invalid_argument;

/// What a model sends to run code. Unknown fields are ignored (clients add their own); `null` is read as absent.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunCodeArgs {
    /// Names the conversation whose /data directory the code sees; files persist across calls with the same id.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"))]
    pub conversation_id: String,
    /// python, typescript, javascript or bash; the aliases listed are accepted too (in any case).
    #[schemars(schema_with = "language_schema")]
    pub language: String,
    /// The program's source code (at most 1 MiB).
    pub code: String,
    /// Deadline of the run, in seconds.
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub timeout_seconds: Option<f64>,
    /// Extra environment variables.
    pub env: Option<BTreeMap<String, String>>,
    /// Text fed to the program's standard input.
    pub stdin: Option<String>,
    /// Your own JSON object about the run (at most 16 KiB), kept in the run history.
    pub metadata: Option<JsonObject>,
    /// Run in the conversation's live sandbox, in the language's persistent interpreter: variables, functions,
    /// imports, the working directory and background processes stay for the next session call.
    pub session: Option<bool>,
    /// Narrows the server's egress policy for this run (never widens it): hosts such as `pypi.org` or
    /// `*.pythonhosted.org:443`, addresses such as `203.0.113.0/24`. `{"allow": []}`: loopback only. Absent: the
    /// server's policy as it is (loopback only on a server without one).
    pub network: Option<NetworkArg>,
}

/// `network`: rules to narrow the server's egress policy with (inlined in the schema: no `$ref` for a model API to
/// resolve).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct NetworkArg {
    /// What the run may reach, within what the server allows.
    #[serde(default)]
    pub allow: Vec<String>,
    /// What it may not, though the server would allow it.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `language`: every name [`Language::NAMES`] holds, the parser's own table.
fn language_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = Language::NAMES.iter().map(|(name, _)| *name).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
}

/// The tool's `inputSchema`, derived once from [`RunCodeArgs`] (see `schema::input_schema_of`).
pub fn input_schema() -> Arc<JsonObject> {
    static SCHEMA: OnceLock<Arc<JsonObject>> = OnceLock::new();
    SCHEMA.get_or_init(|| Arc::new(crate::kit::schema::input_schema_of::<RunCodeArgs>())).clone()
}

/// The fields the schema requires, in its order.
fn required() -> Vec<String> {
    match input_schema().get("required") {
        Some(Value::Array(fields)) => fields.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// Parses a call's arguments; a bad one is -32602 naming its field (`data.field`: the top-level argument) and, in
/// the message, its path (`env.A`).
pub fn parse(arguments: &JsonObject) -> Result<RunCodeArgs, McpError> {
    // Absent and null are the same to a model: both get "missing".
    for field in required() {
        if matches!(arguments.get(&field), None | Some(Value::Null)) {
            return Err(invalid_argument(&field, format!("missing required argument {field}")));
        }
    }
    // A copy of the arguments (at most the 1 MiB body): microseconds beside a run's milliseconds.
    let args: RunCodeArgs = serde_path_to_error::deserialize(Value::Object(arguments.clone())).map_err(|error| {
        let path = error.path().to_string();
        let field = path.split(['.', '[']).next().filter(|f| !f.is_empty() && *f != "?").unwrap_or("arguments");
        invalid_argument(field, format!("{path}: {}", error.inner()))
    })?;
    if let Some(secs) = args.timeout_seconds
        && !(secs.is_finite() && secs > 0.0)
    {
        return Err(invalid_argument("timeoutSeconds", "timeoutSeconds must be a positive number of seconds"));
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_language_names() -> Vec<String> {
        let schema = input_schema();
        let names = &schema["properties"]["language"]["enum"];
        names.as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()).collect()
    }

    /// Every name the parser accepts is in the schema's enum, and nothing else is: schema and parser share
    /// [`Language::NAMES`]. (The seed's enum had `node` and `shell` but not `py`, `ts`, `js`, `sh`, ...)
    #[test]
    fn the_language_enum_is_exactly_what_the_parser_accepts() {
        let names = schema_language_names();
        for (name, language) in Language::NAMES {
            assert!(names.iter().any(|n| n == name), "{name} missing from the schema");
            assert_eq!(name.parse::<Language>().unwrap(), language);
        }
        for name in &names {
            assert!(name.parse::<Language>().is_ok(), "the schema offers {name}, which the parser refuses");
        }
        for refused in ["cobol", "python2", "", "rust"] {
            assert!(refused.parse::<Language>().is_err() && !names.iter().any(|n| n == refused), "{refused}");
        }
    }

    #[test]
    fn the_schema_names_the_arguments_the_parser_reads() {
        let schema = input_schema();
        let properties: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(
            properties,
            ["code", "conversationId", "env", "language", "metadata", "network", "session", "stdin", "timeoutSeconds"]
                .iter()
                .collect::<Vec<_>>()
        );
        assert_eq!(required(), ["conversationId", "language", "code"]);
        assert_eq!(schema["type"], "object");
        assert!(!schema.contains_key("title") && !schema.contains_key("description"));
        // Plain types only: no `["string", "null"]` for a model API to choke on.
        for (name, property) in schema["properties"].as_object().unwrap() {
            assert!(property["type"].is_string(), "{name}: {property}");
        }
        assert_eq!(schema["properties"]["timeoutSeconds"]["exclusiveMinimum"], 0);
    }

    #[test]
    fn a_bad_value_names_its_path() {
        let arguments = |value: Value| value.as_object().unwrap().clone();
        let error = parse(&arguments(
            serde_json::json!({ "conversationId": "c", "language": "py", "code": "1", "env": { "A": 1 } }),
        ))
        .unwrap_err();
        assert_eq!(error.message, "env.A: invalid type: integer `1`, expected a string");
        assert_eq!(error.data.unwrap()["field"], "env");
        let ok =
            parse(&arguments(serde_json::json!({ "conversationId": "c", "language": "PY", "code": "1", "env": null })))
                .unwrap();
        assert_eq!((ok.language.as_str(), ok.env), ("PY", None));
        let error = parse(&arguments(
            serde_json::json!({ "conversationId": "c", "language": "py", "code": "1", "session": "yes" }),
        ))
        .unwrap_err();
        assert_eq!(error.data.unwrap()["field"], "session");
        let on = parse(&arguments(
            serde_json::json!({ "conversationId": "c", "language": "py", "code": "1", "session": true }),
        ))
        .unwrap();
        assert_eq!(on.session, Some(true));
    }
}
