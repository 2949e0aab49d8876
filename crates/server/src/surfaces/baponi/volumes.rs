//! Baponi's named volumes (`SANDLOT_BAPONI_VOLUMES`): host directories, each under a slug, mounted into every
//! Baponi run at `/data/<slug>` (where Baponi's SDK tells models to look: "Storage volumes mounted at
//! /data/<volume-name>/"), read-only unless configured `:rw`; and read (listed, downloaded, for `:rw` uploaded)
//! through `files_download` and the Files API with `source: "volume"` (beneath the directory, never through a
//! symlink).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// One volume: a host directory, and whether runs may write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub path: PathBuf,
    pub writable: bool,
}

/// The configured volumes by slug.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Volumes(pub BTreeMap<String, Volume>);

impl Volumes {
    /// Parses `slug=/host/dir:ro,slug2=/dir:rw` (the mode is optional, `ro` by default). Slugs are
    /// `^[a-z0-9][a-z0-9_-]*$`, at most 64 characters, each once; directories absolute, existing directories.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut volumes = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (slug, rest) = item.split_once('=').ok_or_else(|| format!("{item:?} is not slug=/dir[:ro|:rw]"))?;
            let slug = slug.trim();
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
            if volumes.insert(slug.to_owned(), Volume { path, writable }).is_some() {
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
        let volumes = Volumes::parse(&format!("data={d}:rw, docs={d}:ro,plain={d}")).unwrap();
        let expected = Volumes(BTreeMap::from([
            ("data".to_owned(), Volume { path: dir.path().into(), writable: true }),
            ("docs".to_owned(), Volume { path: dir.path().into(), writable: false }),
            ("plain".to_owned(), Volume { path: dir.path().into(), writable: false }),
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
        ] {
            let error = Volumes::parse(&text).unwrap_err();
            assert!(error.contains(reason), "{text}: {error}");
        }
    }
}
