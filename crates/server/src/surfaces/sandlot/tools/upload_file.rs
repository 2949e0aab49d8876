//! `sandbox.upload_file {conversationId, path, content | contentBase64}` → `{path, size, url}`: writes a file into
//! the conversation's `/data` for the code of later runs to use. The arguments are one Rust type and the result
//! another ([`UploadFileOutput`]); the `inputSchema` and `outputSchema` are derived from them with schemars, as for
//! `run_code`. The write is `Engine::upload_file`: symlink-safe, within the conversation's disk quota, owned by the
//! sandbox's storage uid. A file is at most what one request carries (the 1 MiB body limit of `/mcp`, less the JSON
//! around it, and base64 costs a third more); larger files go through a signed upload URL
//! (`POST /v1/conversations/{id}/uploads`).

use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::AppState;
use crate::kit::Caller;
use crate::kit::conversation_access;
use crate::kit::rpc_errors::{self as errors, invalid_argument};

pub const NAME: &str = "sandbox.upload_file";

/// What a model sends to put a file in `/data`. Exactly one of `content` and `contentBase64`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploadFileArgs {
    /// The conversation whose /data receives the file (the same id as for sandbox_run_code).
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"))]
    pub conversation_id: String,
    /// Where the file goes, relative to /data (`input/sales.csv`); missing directories are created, an existing
    /// file is replaced.
    pub path: String,
    /// The file's content as text (UTF-8). Give this or contentBase64.
    pub content: Option<String>,
    /// The file's content in standard base64, for binary files. Give this or content.
    pub content_base64: Option<String>,
}

/// The tool's `inputSchema`, derived once from [`UploadFileArgs`] (see `schema::input_schema_of`).
pub fn input_schema() -> Arc<JsonObject> {
    static SCHEMA: OnceLock<Arc<JsonObject>> = OnceLock::new();
    SCHEMA.get_or_init(|| Arc::new(crate::kit::schema::input_schema_of::<UploadFileArgs>())).clone()
}

/// What `sandbox.upload_file` returns; the tool's `outputSchema` is derived from it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UploadFileOutput {
    /// Where the file is, relative to /data.
    pub path: String,
    pub size: u64,
    /// Signed download URL.
    pub url: String,
}

pub fn definition() -> Tool {
    Tool::new(
        NAME,
        "Write a file into the conversation's /data directory, for code run later with sandbox.run_code in the same \
         conversation to read. Text goes in content, binary in contentBase64; at most about 700 KiB per call.",
        input_schema(),
    )
    .with_title("Upload a file to the sandbox")
    .with_raw_output_schema(Arc::new(crate::kit::schema::output_schema_of::<UploadFileOutput>()))
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(true).open_world(false))
}

/// Parses a call's arguments; a bad one is -32602 naming its field.
pub fn parse(arguments: &JsonObject) -> Result<(UploadFileArgs, Vec<u8>), McpError> {
    for field in ["conversationId", "path"] {
        if matches!(arguments.get(field), None | Some(Value::Null)) {
            return Err(invalid_argument(field, format!("missing required argument {field}")));
        }
    }
    let args: UploadFileArgs = serde_path_to_error::deserialize(Value::Object(arguments.clone())).map_err(|error| {
        let path = error.path().to_string();
        let field = path.split(['.', '[']).next().filter(|f| !f.is_empty() && *f != "?").unwrap_or("arguments");
        invalid_argument(field, format!("{path}: {}", error.inner()))
    })?;
    let bytes = match (&args.content, &args.content_base64) {
        (Some(text), None) => text.as_bytes().to_vec(),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| invalid_argument("contentBase64", format!("contentBase64 is not valid base64: {e}")))?,
        (Some(_), Some(_)) => {
            return Err(invalid_argument("content", "give content or contentBase64, not both"));
        }
        (None, None) => {
            return Err(invalid_argument("content", "missing the file's content: give content or contentBase64"));
        }
    };
    Ok((args, bytes))
}

pub async fn call(state: &AppState, arguments: JsonObject, caller: &Caller) -> Result<CallToolResult, McpError> {
    let (args, bytes) = parse(&arguments)?;
    let conversation =
        sandlot_core::ConversationId::parse(&args.conversation_id).map_err(|e| errors::from_engine(&e))?;
    let tenant = caller.tenant();
    conversation_access::claim(&state.engine, &tenant, &conversation).map_err(|e| errors::from_engine(&e))?;
    let written =
        state.engine.upload_file(&conversation, &args.path, bytes).await.map_err(|e| errors::from_engine(&e))?;
    let url = state.files.url(conversation.as_str(), &written.path);
    let output = UploadFileOutput { path: written.path, size: written.size, url };
    Ok(CallToolResult::structured(crate::kit::schema::structured(&output)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn arguments(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_schema_names_the_arguments_the_parser_reads() {
        let schema = input_schema();
        let properties: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(properties, ["content", "contentBase64", "conversationId", "path"].iter().collect::<Vec<_>>());
        assert_eq!(schema["required"], json!(["conversationId", "path"]));
        for (name, property) in schema["properties"].as_object().unwrap() {
            assert!(property["type"].is_string(), "{name}: {property}");
        }
    }

    #[test]
    fn content_comes_as_text_or_base64_exactly_once() {
        let (_, bytes) = parse(&arguments(json!({ "conversationId": "c", "path": "a.txt", "content": "hé" }))).unwrap();
        assert_eq!(bytes, "hé".as_bytes());
        let (_, bytes) =
            parse(&arguments(json!({ "conversationId": "c", "path": "a.bin", "contentBase64": "AAEC/w==" }))).unwrap();
        assert_eq!(bytes, [0, 1, 2, 255]);
        let field = |value: Value| parse(&arguments(value)).unwrap_err().data.unwrap()["field"].clone();
        assert_eq!(
            field(json!({ "conversationId": "c", "path": "a", "content": "x", "contentBase64": "eA==" })),
            "content"
        );
        assert_eq!(field(json!({ "conversationId": "c", "path": "a" })), "content");
        assert_eq!(
            field(json!({ "conversationId": "c", "path": "a", "contentBase64": "not base64!" })),
            "contentBase64"
        );
        assert_eq!(field(json!({ "conversationId": "c", "content": "x" })), "path");
        assert_eq!(field(json!({ "conversationId": "c", "path": 3, "content": "x" })), "path");
        assert_eq!(field(json!({ "path": "a", "content": "x" })), "conversationId");
    }
}
