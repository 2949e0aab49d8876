//! Tool schemas derived from Rust types, so schema and code cannot drift: a tool's `inputSchema` from the type its
//! arguments are parsed into, its `outputSchema` from the type its `structuredContent` is serialized from.

use rmcp::model::JsonObject;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// `T`'s JSON schema (draft 2020-12, the MCP default) as a tool's `inputSchema`: without the wrapper type's title
/// and doc, and with an optional argument's type as its plain type, not schemars' `[T, "null"]`: model APIs that
/// take an OpenAPI subset (Gemini's) refuse type arrays, and the parsers read `null` as absent anyway.
pub fn input_schema_of<T: schemars::JsonSchema + std::any::Any>() -> JsonObject {
    let mut schema = (*rmcp::handler::server::common::schema_for_type::<T>()).clone();
    plain(&mut schema);
    schema
}

/// The `outputSchema` of a tool whose `structuredContent` is a serialized `T` (see [`structured`]): what `T`
/// writes (schemars' serialize contract: a field skipped when empty is not required), with nested types inlined
/// (no `$ref`, which not every client's validator resolves), without the type's title and doc, without schemars'
/// integer formats, and an optional field's type as its plain type: an output type skips its `None` fields, it
/// never writes `null`.
pub fn output_schema_of<T: schemars::JsonSchema>() -> JsonObject {
    let settings = SchemaSettings::draft2020_12().for_serialize().with(|s| s.inline_subschemas = true);
    let mut schema = match serde_json::to_value(settings.into_generator().into_root_schema_for::<T>()) {
        Ok(Value::Object(schema)) => schema,
        _ => JsonObject::new(),
    };
    plain(&mut schema);
    // schemars' Rust integer formats (`uint64`, `int32`) are no JSON Schema formats: validators that compile the
    // schema (the TypeScript SDK's Ajv) warn about each on every compile.
    each_property(&mut schema, &mut |property| {
        if matches!(property.get("type").and_then(Value::as_str), Some("integer" | "number")) {
            property.remove("format");
        }
    });
    schema
}

/// `value` as a tool's `structuredContent` (a JSON object, as MCP requires).
pub fn structured<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|_| Value::Object(JsonObject::new()))
}

/// Drops the top-level title and doc, and makes every optional property's type plain, at every depth.
fn plain(schema: &mut JsonObject) {
    schema.remove("title");
    schema.remove("description");
    each_property(schema, &mut plain_type);
}

/// `[T, "null"]` becomes `T`; `anyOf: [S, {type: null}]` (an `Option` of an enum or struct) becomes `S`.
fn plain_type(property: &mut JsonObject) {
    if let Some(Value::Array(types)) = property.get("type") {
        let types: Vec<&Value> = types.iter().filter(|t| t.as_str() != Some("null")).collect();
        if let [single] = types.as_slice() {
            let single = (*single).clone();
            property.insert("type".into(), single);
        }
    }
    if let Some(Value::Array(any_of)) = property.get("anyOf") {
        let null = serde_json::json!({ "type": "null" });
        let others: Vec<&Value> = any_of.iter().filter(|s| **s != null).collect();
        if let [Value::Object(single)] = others.as_slice() {
            let single = single.clone();
            property.remove("anyOf");
            for (key, value) in single {
                property.entry(key).or_insert(value);
            }
        }
    }
}

/// Calls `f` on every property's schema, nested ones (of objects, array items, map values) included.
fn each_property(schema: &mut JsonObject, f: &mut impl FnMut(&mut JsonObject)) {
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if let Value::Object(property) = property {
                f(property);
                each_property(property, f);
            }
        }
    }
    for nested in ["items", "additionalProperties"] {
        if let Some(Value::Object(inner)) = schema.get_mut(nested) {
            f(inner);
            each_property(inner, f);
        }
    }
}
