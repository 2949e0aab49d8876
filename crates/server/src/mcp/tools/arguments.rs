//! Reading tool arguments field by field, so every bad value gets a -32602 naming its field.

use std::collections::BTreeMap;

use rmcp::ErrorData as McpError;
use rmcp::model::JsonObject;
use serde_json::Value;

use crate::mcp::errors::invalid_argument;

/// A required string.
pub fn required_string(arguments: &JsonObject, field: &str) -> Result<String, McpError> {
    match arguments.get(field) {
        Some(Value::String(text)) => Ok(text.clone()),
        None | Some(Value::Null) => Err(invalid_argument(field, format!("missing required argument {field}"))),
        Some(other) => Err(invalid_argument(field, format!("{field} must be a string, not {}", kind(other)))),
    }
}

/// An optional string.
pub fn optional_string(arguments: &JsonObject, field: &str) -> Result<Option<String>, McpError> {
    match arguments.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(invalid_argument(field, format!("{field} must be a string, not {}", kind(other)))),
    }
}

/// An optional positive number of seconds.
pub fn optional_seconds(arguments: &JsonObject, field: &str) -> Result<Option<f64>, McpError> {
    match arguments.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(secs) if secs.is_finite() && secs > 0.0 => Ok(Some(secs)),
            _ => Err(invalid_argument(field, format!("{field} must be a positive number of seconds"))),
        },
        Some(other) => Err(invalid_argument(field, format!("{field} must be a number, not {}", kind(other)))),
    }
}

/// An optional object of string values.
pub fn optional_string_map(arguments: &JsonObject, field: &str) -> Result<BTreeMap<String, String>, McpError> {
    match arguments.get(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(invalid_argument(field, format!("{field}.{k} must be a string, not {}", kind(other)))),
            })
            .collect(),
        Some(other) => Err(invalid_argument(field, format!("{field} must be an object, not {}", kind(other)))),
    }
}

/// An optional JSON object, kept as it is.
pub fn optional_object(arguments: &JsonObject, field: &str) -> Result<Option<Value>, McpError> {
    match arguments.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(object @ Value::Object(_)) => Ok(Some(object.clone())),
        Some(other) => Err(invalid_argument(field, format!("{field} must be an object, not {}", kind(other)))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
