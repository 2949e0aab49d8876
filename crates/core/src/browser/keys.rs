//! Key names as `browser_press_key` takes them (`Enter`, `Control+A`, `Shift+Tab`) to the DevTools protocol's key
//! events: modifiers joined by `+` before one key, a named key (the DOM's `KeyboardEvent.key` names) or a single
//! character.

use serde_json::{Value, json};

/// The protocol's modifier bits.
const ALT: u32 = 1;
const CONTROL: u32 = 2;
const META: u32 = 4;
const SHIFT: u32 = 8;

/// One key press: its `keyDown` (with the text it types, if any) and `keyUp` parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Press {
    pub down: Value,
    pub up: Value,
}

/// The named keys: DOM name, DOM code, Windows virtual key code, the text it types.
const NAMED: &[(&str, &str, u32, &str)] = &[
    ("Enter", "Enter", 13, "\r"),
    ("Tab", "Tab", 9, "\t"),
    ("Backspace", "Backspace", 8, ""),
    ("Escape", "Escape", 27, ""),
    ("Delete", "Delete", 46, ""),
    ("Space", "Space", 32, " "),
    ("ArrowUp", "ArrowUp", 38, ""),
    ("ArrowDown", "ArrowDown", 40, ""),
    ("ArrowLeft", "ArrowLeft", 37, ""),
    ("ArrowRight", "ArrowRight", 39, ""),
    ("Home", "Home", 36, ""),
    ("End", "End", 35, ""),
    ("PageUp", "PageUp", 33, ""),
    ("PageDown", "PageDown", 34, ""),
];

/// `keys` as one press, or why it is not one.
pub fn parse(keys: &str) -> Result<Press, String> {
    let parts: Vec<&str> = keys.split('+').map(str::trim).collect();
    let (key, modifier_names) = match parts.split_last() {
        // "Control++" names the key `+`.
        Some((last, rest)) if last.is_empty() && keys.ends_with("++") => ("+", &rest[..rest.len().saturating_sub(1)]),
        Some((last, rest)) => (*last, rest),
        None => return Err("no key given".to_owned()),
    };
    let mut modifiers = 0;
    for name in modifier_names {
        modifiers |= match name.to_ascii_lowercase().as_str() {
            "alt" => ALT,
            "control" | "ctrl" => CONTROL,
            "meta" | "command" | "cmd" => META,
            "shift" => SHIFT,
            _ => return Err(format!("unknown modifier {name:?} in {keys:?}: use Alt, Control, Meta or Shift")),
        };
    }
    let (key, code, virtual_code, text) =
        if let Some((name, code, vk, text)) = NAMED.iter().find(|(name, ..)| name.eq_ignore_ascii_case(key)) {
            let key = if *name == "Space" { " " } else { name };
            (key.to_owned(), (*code).to_owned(), *vk, (*text).to_owned())
        } else {
            let mut chars = key.chars();
            let (Some(c), None) = (chars.next(), chars.next()) else {
                return Err(format!("unknown key {key:?} in {keys:?}: a single character or a key name such as Enter"));
            };
            let upper = c.to_ascii_uppercase();
            let code = match c {
                'a'..='z' | 'A'..='Z' => format!("Key{upper}"),
                '0'..='9' => format!("Digit{c}"),
                _ => String::new(),
            };
            let vk = if c.is_ascii_alphanumeric() { upper as u32 } else { 0 };
            (c.to_string(), code, vk, c.to_string())
        };
    // A chord with Control, Alt or Meta types nothing (Control+A selects, it does not type "a").
    let text = if modifiers & (CONTROL | ALT | META) != 0 { String::new() } else { text };
    let mut down = json!({
        "type": if text.is_empty() { "rawKeyDown" } else { "keyDown" },
        "modifiers": modifiers, "key": key, "code": code,
        "windowsVirtualKeyCode": virtual_code, "nativeVirtualKeyCode": virtual_code,
    });
    if !text.is_empty() {
        down["text"] = Value::String(text.clone());
        down["unmodifiedText"] = Value::String(text);
    }
    // Editing commands a chord means (the protocol does not run them from the key alone).
    if modifiers & (CONTROL | META) != 0 && key.eq_ignore_ascii_case("a") {
        down["commands"] = json!(["selectAll"]);
    }
    let up = json!({
        "type": "keyUp", "modifiers": modifiers, "key": down["key"], "code": down["code"],
        "windowsVirtualKeyCode": virtual_code, "nativeVirtualKeyCode": virtual_code,
    });
    Ok(Press { down, up })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_chords_and_characters() {
        let enter = parse("Enter").unwrap();
        assert_eq!(enter.down["text"], "\r");
        assert_eq!(enter.down["windowsVirtualKeyCode"], 13);
        let select_all = parse("Control+A").unwrap();
        assert_eq!(select_all.down["modifiers"], CONTROL);
        assert_eq!(select_all.down["commands"], json!(["selectAll"]));
        assert!(select_all.down.get("text").is_none());
        assert_eq!(parse("x").unwrap().down["text"], "x");
        assert_eq!(parse("Control++").unwrap().down["key"], "+");
        assert!(parse("Hyper+x").unwrap_err().contains("Hyper"));
        assert!(parse("Return key").is_err());
    }
}
