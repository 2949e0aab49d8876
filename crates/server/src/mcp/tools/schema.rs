//! Tool input schemas derived from the Rust types arguments are parsed into, so schema and parser cannot drift.

use rmcp::model::JsonObject;
use serde_json::Value;

/// `T`'s JSON schema (draft 2020-12, the MCP default) as a tool's `inputSchema`: without the wrapper type's title
/// and doc, and with an optional argument's type as its plain type, not schemars' `[T, "null"]`: model APIs that
/// take an OpenAPI subset (Gemini's) refuse type arrays, and the parsers read `null` as absent anyway.
pub fn input_schema_of<T: schemars::JsonSchema + std::any::Any>() -> JsonObject {
    let mut schema = (*rmcp::handler::server::common::schema_for_type::<T>()).clone();
    schema.remove("title");
    schema.remove("description");
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if let Some(Value::Array(types)) = property.get("type") {
                let types: Vec<&Value> = types.iter().filter(|t| t.as_str() != Some("null")).collect();
                if let [single] = types.as_slice() {
                    property["type"] = (*single).clone();
                }
            }
        }
    }
    schema
}
