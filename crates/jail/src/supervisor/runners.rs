//! Host interpreters the jail can run, found at start.
//!
//! The jail shows the host's system dirs read-only, so a runner is just a host program. Paths are preferred over
//! `PATH` lookups so a fast system interpreter wins over a shim (pyenv's `python3` shim is a bash script that costs
//! ~90 ms and cannot work inside the jail). An interpreter installed outside the system dirs (a pyenv build, say)
//! gets its install prefix bound read-only at the same path, in its own runs only: the narrowest directory that
//! holds it (a `node_modules`, an interpreter build), never one holding the data root, the current directory or a
//! home directory ([`screen_runners`] refuses such a runner; `sandlot doctor` names it). Each runner can be pinned
//! with an environment variable: `SANDLOT_PYTHON`, `SANDLOT_NODE`, `SANDLOT_TYPESCRIPT` (node, tsx, deno or bun),
//! `SANDLOT_BASH`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandlot_core::Language;

/// Directories the jail always shows; programs under them need no extra bind.
const SYSTEM_PREFIXES: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// A host interpreter for one language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRunner {
    pub language: Language,
    /// What is exec'd (visible at the same path in the jail).
    pub program: PathBuf,
    /// Arguments before the code file.
    pub args: Vec<String>,
    /// Install prefixes outside the system dirs, bound read-only.
    pub extra_ro_binds: Vec<PathBuf>,
    /// `program --version`'s first line, or empty when not probed.
    pub version: String,
    /// Key packages installed for it, name → version (`KEY_PACKAGES` for Python), or empty when not probed.
    pub packages: BTreeMap<String, String>,
}

/// The packages `sandbox_list_runners` reports for Python when the interpreter has them (scripts/python-env.sh
/// installs all three).
pub const KEY_PACKAGES: &[&str] = &["numpy", "pandas", "matplotlib"];

/// Asks a Python interpreter, once, which of [`KEY_PACKAGES`] it has. It reads the installed metadata only (no
/// import: a few milliseconds); `-I` keeps the server's own `PYTHON*` variables and the user site out.
fn python_packages(program: &Path) -> BTreeMap<String, String> {
    const PROBE: &str = "import sys, importlib.metadata as m\n\
        for name in sys.argv[1:]:\n    \
            try: print(name, m.version(name))\n    \
            except Exception: pass\n";
    let Ok(output) = Command::new(program).arg("-I").arg("-c").arg(PROBE).args(KEY_PACKAGES).output() else {
        return BTreeMap::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(name, _)| KEY_PACKAGES.contains(name))
        .map(|(name, version)| (name.to_owned(), version.trim().to_owned()))
        .collect()
}

/// Pinned interpreter paths (from the environment, or flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerOverrides {
    pub python: Option<PathBuf>,
    pub node: Option<PathBuf>,
    pub typescript: Option<PathBuf>,
    pub bash: Option<PathBuf>,
}

impl RunnerOverrides {
    /// Reads `SANDLOT_PYTHON`, `SANDLOT_NODE`, `SANDLOT_TYPESCRIPT` and `SANDLOT_BASH`.
    pub fn from_env() -> Self {
        let get = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        Self {
            python: get("SANDLOT_PYTHON"),
            node: get("SANDLOT_NODE"),
            typescript: get("SANDLOT_TYPESCRIPT"),
            bash: get("SANDLOT_BASH"),
        }
    }
}

/// Whether `path` is a regular file with an execute bit (what the jail's exec needs, short of the bind).
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn search_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

/// The first executable among `candidates`, then `name` on `PATH`.
fn find(candidates: &[&str], name: &str) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| is_executable(p)).or_else(|| search_path(name))
}

fn under_system_dirs(path: &Path) -> bool {
    SYSTEM_PREFIXES.iter().any(|prefix| path.starts_with(prefix))
}

/// The install prefix of one file: the `node_modules` directory it is in (the first one on its path: a project's
/// `<app>/node_modules`, or a global `<prefix>/lib/node_modules`), else the parent of the `bin` dir holding it (an
/// interpreter's own build, which needs its `lib` too), else its own dir. Never more than that: a project-local
/// tsx must not expose its project (`<app>/.env`, a data root under `<app>`).
fn prefix_of(path: &Path) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        if component.as_os_str() == "node_modules" {
            return Some(prefix);
        }
    }
    let dir = path.parent()?;
    Some(if dir.file_name().is_some_and(|n| n == "bin") { dir.parent()?.to_path_buf() } else { dir.to_path_buf() })
}

/// The prefixes to bind for a program outside the system dirs: the one of the path as given (a virtualenv's
/// `bin/python` needs its virtualenv, an npm `bin` link its npm prefix) and the one of the file it resolves to (the
/// package the symlink points into).
fn install_prefixes(program: &Path) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    let real = std::fs::canonicalize(program).ok();
    for path in [Some(program.to_path_buf()), real].into_iter().flatten() {
        if under_system_dirs(&path) {
            continue;
        }
        if let Some(prefix) = prefix_of(&path)
            && !prefixes.iter().any(|p| prefix.starts_with(p))
        {
            prefixes.retain(|p| !p.starts_with(&prefix));
            prefixes.push(prefix);
        }
    }
    prefixes
}

/// A runner left out because binding its install prefix would show the sandbox more than the runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRunner {
    pub language: Language,
    pub program: PathBuf,
    /// The prefix that would have been bound.
    pub bind: PathBuf,
    /// What it holds that no sandbox may see.
    pub exposes: PathBuf,
}

impl std::fmt::Display for RefusedRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} runner {} refused: binding {} would show every sandbox {}",
            self.language,
            self.program.display(),
            self.bind.display(),
            self.exposes.display()
        )
    }
}

/// Directories no bind may contain: the data root (every conversation), the current directory (where a server's
/// configuration and `.env` usually are), and home directories (`/root`, `/home/*`, `$HOME`).
pub fn protected_dirs(data_root: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = vec![PathBuf::from("/root"), PathBuf::from("/home")];
    if let Ok(homes) = std::fs::read_dir("/home") {
        dirs.extend(homes.flatten().map(|entry| entry.path()));
    }
    dirs.extend(std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from));
    dirs.extend(std::env::current_dir().ok());
    dirs.extend(data_root.map(Path::to_path_buf));
    dirs.iter().map(|dir| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone())).collect()
}

/// Splits `runners` into those whose binds are safe and those refused because a bind would contain one of
/// `protected` (see [`protected_dirs`]).
pub fn screen_runners(runners: Vec<HostRunner>, protected: &[PathBuf]) -> (Vec<HostRunner>, Vec<RefusedRunner>) {
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    for runner in runners {
        let exposed = runner.extra_ro_binds.iter().find_map(|bind| {
            let canonical = std::fs::canonicalize(bind).unwrap_or_else(|_| bind.clone());
            protected.iter().find(|dir| dir.starts_with(&canonical)).map(|dir| (bind.clone(), dir.clone()))
        });
        match exposed {
            Some((bind, exposes)) => {
                refused.push(RefusedRunner { language: runner.language, program: runner.program, bind, exposes })
            }
            None => kept.push(runner),
        }
    }
    (kept, refused)
}

/// esbuild as a live sandbox's TypeScript needs it: the package directory `require()` loads it from (tsx's own
/// dependency), and the prefix to bind for it (none under the system dirs). tsx is the TypeScript runner when that
/// is tsx, else `tsx` on `PATH`. `None`: no tsx, no esbuild beside it, or a prefix that holds one of `protected`.
pub fn find_esbuild(runners: &[HostRunner], protected: &[PathBuf]) -> Option<(PathBuf, Vec<PathBuf>)> {
    let tsx = runners
        .iter()
        .find(|r| r.language == Language::TypeScript && r.program.file_name().is_some_and(|n| n == "tsx"))
        .map(|r| r.program.clone())
        .or_else(|| search_path("tsx"))?;
    let real = std::fs::canonicalize(tsx).ok()?;
    // The tsx package: the directory right under a `node_modules`; Node looks for esbuild in the package's own
    // `node_modules`, then beside it.
    let package = real
        .ancestors()
        .find(|dir| dir.parent().is_some_and(|p| p.file_name().is_some_and(|n| n == "node_modules")))?;
    let esbuild = [package.join("node_modules/esbuild"), package.parent()?.join("esbuild")]
        .into_iter()
        .find(|dir| dir.join("package.json").is_file())?;
    let binds: Vec<PathBuf> = match under_system_dirs(&esbuild) {
        true => vec![],
        false => vec![prefix_of(&esbuild)?],
    };
    let exposes = |bind: &PathBuf| protected.iter().any(|dir| dir.starts_with(bind));
    if binds.iter().any(exposes) {
        return None;
    }
    Some((esbuild, binds))
}

/// Runs `program args` and returns its first line of output.
fn first_line(program: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).env("NO_COLOR", "1").output().ok()?;
    let text = if output.stdout.is_empty() { output.stderr } else { output.stdout };
    String::from_utf8_lossy(&text).lines().next().map(|l| l.trim().to_owned())
}

/// Resolves a pyenv-style shim to the interpreter it would run.
fn resolve_python(program: PathBuf) -> PathBuf {
    let mut magic = [0u8; 2];
    let is_shim = std::fs::File::open(&program).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok()
        && &magic == b"#!";
    if !is_shim {
        return program;
    }
    first_line(&program, &["-c", "import sys; print(sys.executable)"]).map(PathBuf::from).unwrap_or(program)
}

/// Node's major and minor version, from `node --version` (`v22.6.0`).
fn node_version(node: &Path) -> Option<(u32, u32)> {
    let line = first_line(node, &["--version"])?;
    let mut parts = line.trim_start_matches('v').split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn runner(language: Language, program: PathBuf, args: &[&str]) -> HostRunner {
    let extra_ro_binds = install_prefixes(&program);
    HostRunner {
        language,
        program,
        args: args.iter().map(|a| a.to_string()).collect(),
        extra_ro_binds,
        version: String::new(),
        packages: BTreeMap::new(),
    }
}

/// The TypeScript runner for a program chosen by name (`node`, `tsx`, `deno`, `bun`).
fn typescript_runner(program: PathBuf) -> Option<HostRunner> {
    let name = program.file_name()?.to_string_lossy().into_owned();
    let args: &[&str] = match name.as_str() {
        "deno" => &["run", "--allow-all", "--no-prompt", "--quiet"],
        "bun" => &["run"],
        "tsx" => &[],
        _ => {
            // Node strips types natively from 22.6 behind a flag, and by default from 23.6.
            let version = node_version(&program)?;
            if version >= (23, 6) {
                &["--disable-warning=ExperimentalWarning"]
            } else if version >= (22, 6) {
                &["--experimental-strip-types", "--disable-warning=ExperimentalWarning"]
            } else {
                return None;
            }
        }
    };
    Some(runner(Language::TypeScript, program, args))
}

fn discover_one(language: Language, overrides: &RunnerOverrides) -> Option<HostRunner> {
    match language {
        Language::Python => {
            let program = overrides
                .python
                .clone()
                .or_else(|| find(&["/usr/bin/python3", "/usr/local/bin/python3"], "python3"))?;
            Some(runner(language, resolve_python(program), &[]))
        }
        Language::JavaScript => {
            let program = overrides.node.clone().or_else(|| find(&["/usr/bin/node", "/usr/local/bin/node"], "node"))?;
            Some(runner(language, program, &[]))
        }
        Language::TypeScript => {
            if let Some(program) = overrides.typescript.clone() {
                return typescript_runner(program);
            }
            let node = overrides.node.clone().or_else(|| find(&["/usr/bin/node", "/usr/local/bin/node"], "node"));
            node.and_then(typescript_runner).or_else(|| {
                ["deno", "bun", "tsx"].iter().find_map(|name| search_path(name).and_then(typescript_runner))
            })
        }
        Language::Bash => {
            let program = overrides.bash.clone().or_else(|| find(&["/bin/bash", "/usr/bin/bash"], "bash"))?;
            Some(runner(language, program, &[]))
        }
    }
}

/// Finds the runners for `languages` on this host; with `probe_versions`, asks each for its version (and Python
/// for its `KEY_PACKAGES`).
pub fn discover_runners(languages: &[Language], overrides: &RunnerOverrides, probe_versions: bool) -> Vec<HostRunner> {
    let mut runners: Vec<HostRunner> = languages.iter().filter_map(|l| discover_one(*l, overrides)).collect();
    if probe_versions {
        for runner in &mut runners {
            runner.version = first_line(&runner.program, &["--version"]).unwrap_or_default();
            if runner.language == Language::Python {
                runner.packages = python_packages(&runner.program);
            }
        }
    }
    runners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_programs_need_no_bind_and_others_bind_their_prefix() {
        assert_eq!(install_prefixes(Path::new("/bin/sh")), Vec::<PathBuf>::new());
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let bin = root.join("opt/tool/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("tool"), "").unwrap();
        assert_eq!(install_prefixes(&bin.join("tool")), vec![root.join("opt/tool")]);
    }

    #[test]
    fn an_npm_script_binds_its_global_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let dist = root.join("npm-global/lib/node_modules/tsx/dist");
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::create_dir_all(root.join("npm-global/bin")).unwrap();
        std::fs::write(dist.join("cli.mjs"), "").unwrap();
        std::os::unix::fs::symlink("../lib/node_modules/tsx/dist/cli.mjs", root.join("npm-global/bin/tsx")).unwrap();
        assert_eq!(install_prefixes(&root.join("npm-global/bin/tsx")), vec![root.join("npm-global")]);
    }

    #[test]
    fn a_project_local_script_binds_its_node_modules_only() {
        let tmp = tempfile::tempdir().unwrap();
        let app = std::fs::canonicalize(tmp.path()).unwrap();
        let dist = app.join("node_modules/tsx/dist");
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::create_dir_all(app.join("node_modules/.bin")).unwrap();
        std::fs::write(dist.join("cli.mjs"), "").unwrap();
        std::os::unix::fs::symlink("../tsx/dist/cli.mjs", app.join("node_modules/.bin/tsx")).unwrap();
        assert_eq!(install_prefixes(&app.join("node_modules/.bin/tsx")), vec![app.join("node_modules")]);
    }

    #[test]
    fn a_virtualenv_binds_the_virtualenv() {
        let tmp = tempfile::tempdir().unwrap();
        let venv = std::fs::canonicalize(tmp.path()).unwrap().join(".venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::os::unix::fs::symlink("/bin/sh", venv.join("bin/python")).unwrap();
        assert_eq!(install_prefixes(&venv.join("bin/python")), vec![venv]);
    }

    #[test]
    fn a_link_elsewhere_binds_its_own_dir_and_the_package() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(root.join("app/tool/dist")).unwrap();
        std::fs::create_dir_all(root.join("links")).unwrap();
        std::fs::write(root.join("app/tool/dist/cli.js"), "").unwrap();
        std::os::unix::fs::symlink("../app/tool/dist/cli.js", root.join("links/tool")).unwrap();
        assert_eq!(install_prefixes(&root.join("links/tool")), vec![root.join("links"), root.join("app/tool/dist")]);
    }

    #[test]
    fn a_bind_holding_the_data_root_the_current_dir_or_a_home_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let app = std::fs::canonicalize(tmp.path()).unwrap();
        let data_root = app.join("sandlot-data");
        std::fs::create_dir_all(&data_root).unwrap();
        let runner = |bind: &Path| HostRunner {
            language: Language::TypeScript,
            program: bind.join("bin/tsx"),
            args: vec![],
            extra_ro_binds: vec![bind.to_path_buf()],
            version: String::new(),
            packages: BTreeMap::new(),
        };
        let protected = protected_dirs(Some(&data_root));
        let candidates =
            vec![runner(&app), runner(&app.join("node_modules")), runner(Path::new("/")), runner(Path::new("/home"))];
        let (kept, refused) = screen_runners(candidates, &protected);
        assert_eq!(kept, vec![runner(&app.join("node_modules"))]);
        let refused: Vec<(PathBuf, PathBuf)> = refused.into_iter().map(|r| (r.bind, r.exposes)).collect();
        assert_eq!(refused[0], (app.clone(), data_root));
        assert_eq!(refused[1].0, PathBuf::from("/"));
        assert_eq!(refused[2], (PathBuf::from("/home"), PathBuf::from("/home")));
        assert_eq!(refused.len(), 3);
    }

    #[test]
    fn python_reports_its_key_packages() {
        // The host's bare interpreter has none of them; a venv made by scripts/python-env.sh has all three.
        let bare = python_packages(Path::new("/usr/bin/python3"));
        assert!(bare.keys().all(|name| KEY_PACKAGES.contains(&name.as_str())), "{bare:?}");
        let tmp = tempfile::tempdir().unwrap();
        let fake = tmp.path().join("python");
        std::fs::write(&fake, "#!/bin/sh\necho 'numpy 2.2.6'; echo 'other 1.0'; echo 'pandas 2.2.3'\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let found = python_packages(&fake);
        let expected: BTreeMap<String, String> =
            [("numpy", "2.2.6"), ("pandas", "2.2.3")].iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn esbuild_is_found_in_tsxs_own_node_modules() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let tsx = root.join("npm/lib/node_modules/tsx");
        std::fs::create_dir_all(tsx.join("dist")).unwrap();
        std::fs::create_dir_all(tsx.join("node_modules/esbuild")).unwrap();
        std::fs::write(tsx.join("dist/cli.mjs"), "").unwrap();
        std::fs::write(tsx.join("node_modules/esbuild/package.json"), "{}").unwrap();
        let runner = HostRunner {
            language: Language::TypeScript,
            program: tsx.join("dist/cli.mjs").with_file_name("cli.mjs"),
            args: vec![],
            extra_ro_binds: vec![],
            version: String::new(),
            packages: BTreeMap::new(),
        };
        // Named tsx: a link like npm's `bin/tsx`.
        std::fs::create_dir_all(root.join("npm/bin")).unwrap();
        std::os::unix::fs::symlink(tsx.join("dist/cli.mjs"), root.join("npm/bin/tsx")).unwrap();
        let runner = HostRunner { program: root.join("npm/bin/tsx"), ..runner };
        let found = find_esbuild(std::slice::from_ref(&runner), &[]);
        assert_eq!(found, Some((tsx.join("node_modules/esbuild"), vec![root.join("npm/lib/node_modules")])));
        assert_eq!(find_esbuild(&[runner], &[root.join("npm/lib/node_modules/x")]), None, "a protected dir inside");
    }

    #[test]
    fn bash_is_found_with_its_version() {
        let runners = discover_runners(&[Language::Bash], &RunnerOverrides::default(), true);
        assert_eq!(runners.len(), 1);
        assert!(runners[0].version.contains("bash"), "{:?}", runners[0]);
    }
}
