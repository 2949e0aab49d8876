//! The files of a run as content blocks a model can use: every file the run made or changed as a `resource_link`
//! (its signed download URL as the uri, its path as the name), and those that are images (PNG, JPEG, GIF, WebP, told
//! by their first bytes, not their names) as `image` blocks, base64, within [`MAX_IMAGE_BYTES`] each and
//! [`MAX_RESULT_IMAGE_BYTES`] per result.
//!
//! "Made or changed" is a listed file whose modification time is at or after the run's start (less
//! [`CLOCK_SLACK`]): the listing the engine makes after every run already has each file's stat, so this costs no
//! extra walk. Files are read through [`sandlot_core::Workspaces::open`], which never follows a symlink.

use std::io::Read;
use std::time::Duration;

use base64::Engine as _;
use rmcp::model::{ContentBlock as Content, Resource};
use sandlot_core::{FileEntry, RunReport, Workspaces};

use crate::AppState;

/// The largest image file sent inline (a larger one comes back as a `resource_link` only).
pub const MAX_IMAGE_BYTES: u64 = 1024 * 1024;
/// The image bytes one result holds in all (before base64, which adds a third): images past it, in path order,
/// come back as `resource_link`s only.
pub const MAX_RESULT_IMAGE_BYTES: u64 = 4 * 1024 * 1024;
/// File timestamps come from the kernel's coarse clock, which may lag the run's start (taken from the precise
/// clock) by a tick (up to 10 ms): a file written at once would look older than the run without this margin.
pub const CLOCK_SLACK: Duration = Duration::from_millis(20);

/// The image type of a file from its first bytes (at least 12 are needed for WebP).
pub fn image_mime(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The files of `report` that the run made or changed, in path order.
pub fn changed_files(report: &RunReport) -> impl Iterator<Item = &FileEntry> {
    let since = report.started_at.checked_sub(CLOCK_SLACK).unwrap_or(report.started_at);
    report.files.files.iter().filter(move |f| f.modified.is_some_and(|m| m >= since))
}

/// The blocks for the files `report`'s run made or changed: images first (a model reads them), then one
/// `resource_link` per file.
pub fn blocks(state: &AppState, report: &RunReport) -> Vec<Content> {
    let conversation = report.conversation_id.as_str();
    let workspaces = state.engine.workspaces();
    blocks_with(report, |path| state.files.url(conversation, path), |path| read_image(workspaces, report, path))
}

/// [`blocks`] with the URL signer and the file reader given (the seam the unit tests use).
fn blocks_with(
    report: &RunReport,
    url: impl Fn(&str) -> String,
    read_image: impl Fn(&str) -> Option<(&'static str, Vec<u8>)>,
) -> Vec<Content> {
    let mut images = Vec::new();
    let mut links = Vec::new();
    let mut image_budget = MAX_RESULT_IMAGE_BYTES;
    for file in changed_files(report) {
        let mut link = Resource::new(url(&file.path), file.path.clone()).with_size(file.size);
        let mut mime = mime_guess::from_path(&file.path).first().map(|m| m.essence_str().to_owned());
        if file.size <= MAX_IMAGE_BYTES.min(image_budget)
            && let Some((image_mime, data)) = read_image(&file.path)
        {
            image_budget = image_budget.saturating_sub(data.len() as u64);
            images.push(Content::image(base64::engine::general_purpose::STANDARD.encode(&data), image_mime));
            mime = Some(image_mime.to_owned());
        }
        if let Some(mime) = mime {
            link = link.with_mime_type(mime);
        }
        links.push(Content::resource_link(link));
    }
    images.extend(links);
    images
}

/// The file's bytes when it is an image within [`MAX_IMAGE_BYTES`] (it may have grown since it was listed), else
/// None. Only the first 12 bytes are read of a file that is not an image.
fn read_image(workspaces: &Workspaces, report: &RunReport, path: &str) -> Option<(&'static str, Vec<u8>)> {
    let file = workspaces.open(&report.conversation_id, path).ok()?;
    let mut reader = file.take(MAX_IMAGE_BYTES + 1);
    let mut head = [0u8; 12];
    let mut got = 0;
    while got < head.len() {
        match reader.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(_) => return None,
        }
    }
    let mime = image_mime(&head[..got])?;
    let mut data = head[..got].to_vec();
    reader.read_to_end(&mut data).ok()?;
    (data.len() as u64 <= MAX_IMAGE_BYTES).then_some((mime, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_told_by_their_first_bytes() {
        let cases: [(&[u8], Option<&str>); 9] = [
            (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", Some("image/png")),
            (b"\xff\xd8\xff\xe0\0\x10JFIF", Some("image/jpeg")),
            (b"GIF89a\x01\0\x01\0", Some("image/gif")),
            (b"GIF87a\x01\0\x01\0", Some("image/gif")),
            (b"RIFF\x24\0\0\0WEBPVP8 ", Some("image/webp")),
            (b"RIFF\x24\0\0\0WAVEfmt ", None),
            (b"\x89PNG\r\n", None),
            (b"<svg xmlns=", None),
            (b"", None),
        ];
        for (head, expected) in cases {
            assert_eq!(image_mime(head), expected, "{head:?}");
        }
    }

    fn report(files: &[(&str, u64, bool)]) -> RunReport {
        let started_at = std::time::SystemTime::now();
        let entry = |(path, size, changed): &(&str, u64, bool)| FileEntry {
            path: path.to_string(),
            size: *size,
            // An unchanged file: last written an hour before the run.
            modified: Some(if *changed { started_at } else { started_at - Duration::from_secs(3600) }),
        };
        RunReport {
            run_id: "r".into(),
            conversation_id: sandlot_core::ConversationId::parse("c").unwrap(),
            language: sandlot_core::Language::Python,
            limits: sandlot_core::Limits::default(),
            outcome: sandlot_core::RunOutcome::empty(sandlot_core::Termination::Exited { code: 0 }, Duration::ZERO),
            files: sandlot_core::FileListing { files: files.iter().map(entry).collect(), truncated: false },
            started_at,
            session: None,
        }
    }

    /// What each block is: ("image", mime) or ("link", name).
    fn kinds(blocks: &[Content]) -> Vec<(String, String)> {
        blocks
            .iter()
            .map(|block| {
                let value = serde_json::to_value(block).unwrap();
                match value["type"].as_str().unwrap() {
                    "image" => ("image".to_owned(), value["mimeType"].as_str().unwrap().to_owned()),
                    kind => (kind.to_owned(), value["name"].as_str().unwrap().to_owned()),
                }
            })
            .collect()
    }

    #[test]
    fn changed_files_come_back_as_links_and_images_within_the_budgets() {
        const MIB: u64 = 1024 * 1024;
        let report = report(&[
            ("a.png", MIB, true),         // 1 MiB: fits (budget left: 3 MiB)
            ("b.png", MIB + 1, true),     // over the per-image limit: a link only
            ("c.png", 100, false),        // unchanged: nothing at all
            ("d.txt", 10, true),          // not an image: a link only
            ("e.png", 2 * MIB, true),     // over the per-image limit
            ("f.png", MIB, true),         // fits (2 MiB left)
            ("g.png", MIB, true),         // fits (1 MiB left)
            ("h.png", MIB / 2, true),     // fits (0.5 MiB left)
            ("i.png", MIB / 2 + 1, true), // over what is left of the result's budget: a link only
        ]);
        let sizes: std::collections::HashMap<&str, u64> =
            report.files.files.iter().map(|f| (f.path.as_str(), f.size)).collect();
        let read = |path: &str| path.ends_with(".png").then(|| ("image/png", vec![0u8; sizes[path] as usize]));
        let blocks = blocks_with(&report, |path| format!("http://test/files/c/{path}"), read);
        let pngs = vec![("image".to_owned(), "image/png".to_owned()); 4];
        let links: Vec<(String, String)> = ["a.png", "b.png", "d.txt", "e.png", "f.png", "g.png", "h.png", "i.png"]
            .iter()
            .map(|name| ("resource_link".to_owned(), name.to_string()))
            .collect();
        assert_eq!(kinds(&blocks), [pngs, links].concat());
        let link = serde_json::to_value(&blocks[4]).unwrap();
        assert_eq!(
            link,
            serde_json::json!({"type": "resource_link", "uri": "http://test/files/c/a.png", "name": "a.png",
                "mimeType": "image/png", "size": MIB})
        );
        let text = serde_json::to_value(&blocks[6]).unwrap();
        assert_eq!(text["mimeType"], "text/plain");
    }

    /// A run that made 1,000 files and 10 PNG images of 100 KiB gets 1,020 blocks. It also prints what building them
    /// costs (no bound is asserted: the figure belongs in docs/benchmarks.md, measured with a release build:
    /// `cargo nextest run --release -p sandlot-server result_building_cost --no-capture`).
    #[test]
    fn result_building_cost() {
        let tmp = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(tmp.path());
        let id = sandlot_core::ConversationId::parse("bench").unwrap();
        let dir = workspaces.prepare(&id).unwrap();
        let started_at = std::time::SystemTime::now();
        for i in 0..1000 {
            std::fs::write(dir.join(format!("data-{i:04}.csv")), "a,b\n1,2\n").unwrap();
        }
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.resize(100 * 1024, 7);
        for i in 0..10 {
            std::fs::write(dir.join(format!("plot-{i}.png")), &png).unwrap();
        }
        let mut report = report(&[]);
        report.conversation_id = id.clone();
        report.started_at = started_at;
        report.files = workspaces.list_within(&id, 1000 + 10, usize::MAX).unwrap();
        let signer = sandlot_core::Signer::new(b"bench-secret");
        let rounds = if cfg!(debug_assertions) { 3 } else { 50 };
        let start = std::time::Instant::now();
        let mut count = 0;
        for _ in 0..rounds {
            let blocks = blocks_with(
                &report,
                |path| signer.url("http://127.0.0.1:8080", "bench", path, None),
                |path| read_image(&workspaces, &report, path),
            );
            count = blocks.len();
        }
        let each = start.elapsed() / rounds;
        let links_only = std::time::Instant::now();
        for _ in 0..rounds {
            blocks_with(&report, |path| signer.url("http://127.0.0.1:8080", "bench", path, None), |_| None);
        }
        let links_only = links_only.elapsed() / rounds;
        let listing = std::time::Instant::now();
        for _ in 0..rounds {
            workspaces.list_within(&id, 1010, usize::MAX).unwrap();
        }
        eprintln!(
            "{count} blocks (10 images, 1010 links) in {each:?} per result ({links_only:?} without reading files); \
             the listing itself: {:?}",
            listing.elapsed() / rounds
        );
        assert_eq!(count, 1020);
    }
}
