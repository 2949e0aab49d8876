//! Baponi's named volumes (`SANDLOT_BAPONI_VOLUMES`): host directories, each under a slug, mounted into every
//! Baponi run at `/data/<slug>` (where Baponi's SDK tells models to look: "Storage volumes mounted at
//! /data/<volume-name>/"), read-only unless configured `:rw`; and read (listed, downloaded, for `:rw` uploaded)
//! through `files_download` and the Files API with `source: "volume"` (beneath the directory, never through a
//! symlink).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// One volume: a host directory, whether runs may write it, and what it may hold then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub path: PathBuf,
    pub writable: bool,
    /// The quota of a writable volume in MiB (`:rw:<MiB>`); `None`: the conversation's (`--disk-mb`).
    pub quota_mb: Option<u64>,
}

/// The configured volumes by slug.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Volumes(pub BTreeMap<String, Volume>);

impl Volumes {
    /// Parses `slug=/host/dir:ro,slug2=/dir:rw,slug3=/dir:rw:64` (the mode is optional, `ro` by default; a writable
    /// volume's quota in MiB may follow, else it has the conversation's). Slugs are `^[a-z0-9][a-z0-9_-]*$`, at most
    /// 64 characters, each once; directories absolute, existing directories.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut volumes = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (slug, rest) = item.split_once('=').ok_or_else(|| format!("{item:?} is not slug=/dir[:ro|:rw]"))?;
            let slug = slug.trim();
            let (rest, quota_mb) = match rest.rsplit_once(':') {
                Some((head, mib)) if !mib.is_empty() && mib.bytes().all(|b| b.is_ascii_digit()) => {
                    let Some(dir) = head.strip_suffix(":rw") else {
                        return Err(format!("volume {slug}: a quota ({mib} MiB) follows :rw only"));
                    };
                    match mib.parse::<u64>() {
                        Ok(mib) if mib > 0 && mib <= 1 << 30 => (format!("{dir}:rw"), Some(mib)),
                        _ => return Err(format!("volume {slug}: quota {mib} must be 1 to 1073741824 MiB")),
                    }
                }
                _ => (rest.to_owned(), None),
            };
            let rest = rest.as_str();
            let valid_slug = slug.len() <= 64
                && slug.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && slug.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
            if !valid_slug {
                return Err(format!("volume name {slug:?} must match ^[a-z0-9][a-z0-9_-]*$ (at most 64 characters)"));
            }
            let (dir, writable) = match rest.rsplit_once(':') {
                Some((dir, "ro")) => (dir, false),
                Some((dir, "rw")) => (dir, true),
                Some((_, mode)) if !mode.contains('/') => {
                    return Err(format!("volume {slug}: mode {mode:?} must be ro or rw"));
                }
                _ => (rest, false),
            };
            let path = PathBuf::from(dir);
            if dir.contains(':') {
                return Err(format!("volume {slug}: {dir:?} has a `:`, which a Docker bind cannot carry"));
            }
            if !path.is_absolute() {
                return Err(format!("volume {slug}: {dir:?} is not an absolute path"));
            }
            if !path.is_dir() {
                return Err(format!("volume {slug}: {dir:?} is not a directory"));
            }
            if volumes.insert(slug.to_owned(), Volume { path, writable, quota_mb }).is_some() {
                return Err(format!("volume {slug} is named twice"));
            }
        }
        Ok(Self(volumes))
    }

    /// Where a run sees the volume named `slug`: beneath its scratch working directory `/data`.
    pub fn path_in_run(slug: &str) -> String {
        format!("/data/{slug}")
    }

    /// Every volume as the engine mounts it into a run.
    pub fn mounts(&self) -> Vec<sandlot_core::Mount> {
        self.0
            .iter()
            .map(|(slug, volume)| sandlot_core::Mount {
                host: volume.path.clone(),
                path: Self::path_in_run(slug),
                read_only: !volume.writable,
                quota_mb: volume.quota_mb,
            })
            .collect()
    }

    /// The volume named `slug`.
    pub fn get(&self, slug: &str) -> Option<&Volume> {
        self.0.get(slug)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_slugs_dirs_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let volumes = Volumes::parse(&format!("data={d}:rw, docs={d}:ro,plain={d},small={d}:rw:64")).unwrap();
        let volume = |writable, quota_mb| Volume { path: dir.path().into(), writable, quota_mb };
        let expected = Volumes(BTreeMap::from([
            ("data".to_owned(), volume(true, None)),
            ("docs".to_owned(), volume(false, None)),
            ("plain".to_owned(), volume(false, None)),
            ("small".to_owned(), volume(true, Some(64))),
        ]));
        assert_eq!(volumes, expected);
        assert_eq!(Volumes::parse("").unwrap(), Volumes::default());
    }

    #[test]
    fn refuses_what_is_wrong_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        for (text, reason) in [
            ("data".to_owned(), "is not slug=/dir"),
            (format!("Bad={d}"), "must match"),
            (format!("a={d}:rx"), "must be ro or rw"),
            ("a=relative".to_owned(), "not an absolute path"),
            ("a=/no/such/dir".to_owned(), "not a directory"),
            (format!("a={d},a={d}"), "named twice"),
            (format!("a={d}/x:y:ro"), "has a `:`"),
            (format!("a={d}:ro:64"), "follows :rw only"),
            (format!("a={d}:64"), "follows :rw only"),
            (format!("a={d}:rw:0"), "must be 1 to"),
            (format!("a={d}:rw:99999999999999999999"), "must be 1 to"),
        ] {
            let error = Volumes::parse(&text).unwrap_err();
            assert!(error.contains(reason), "{text}: {error}");
        }
    }
}
