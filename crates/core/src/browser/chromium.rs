//! The one place Chromium's command line is made: what runs in a live sandbox when a conversation first uses its
//! browser.
//!
//! Debian's Chromium, started as `/usr/lib/chromium/chromium`, the binary `/usr/bin/chromium` execs: that wrapper
//! sources `/etc/chromium.d/*`, which a sandbox does not see, and exits when it cannot. Its flags here are the
//! wrapper's defaults that matter headless (`--disable-background-networking`, `--disable-pings`...).
//!
//! - `--no-sandbox`: the jail (or the container) is the sandbox. Chromium's own needs a setuid helper or new user
//!   namespaces, which the sandbox's seccomp filter and dropped capabilities refuse (docs/security.md, "The
//!   browser").
//! - `--remote-debugging-pipe`: the server drives it over the DevTools protocol on fds 3 and 4, which the launch
//!   script makes from the process's stdin and stdout. No port is opened: nothing in the sandbox can reach the
//!   debugger, and the server needs no way into the sandbox's network namespace.
//! - The profile (cookies, storage, cache) is under the sandbox's `/tmp` ([`BROWSER_HOME`]), never in the
//!   conversation's files: it dies with the sandbox, and no other sandbox sees it.
//! - `/dev/shm` is small in a sandbox: `--disable-dev-shm-usage` puts Chromium's shared memory in `/tmp`.
//! - The network is the sandbox's own: loopback only, or on its egress leash, where [`network_flags`] sends every
//!   request through sandlot's proxy (Chromium keeps loopback direct).

use std::collections::BTreeMap;

use crate::{Language, Spawn};

/// Debian's Chromium binary (package `chromium`).
pub const CHROMIUM: &str = "/usr/lib/chromium/chromium";
/// The browser's home in the sandbox: its profile, font cache and config.
pub const BROWSER_HOME: &str = "/tmp/.sandlot-browser";
/// The viewport of every tab, and so of every screenshot.
pub const VIEWPORT: (u32, u32) = (1280, 800);

/// Writes a fontconfig file when the system has none (a jail shows `/usr/share` but not `/etc/fonts`): the fonts
/// of `/usr/share/fonts` and Debian's default rules from `/usr/share/fontconfig/conf.avail` (generic families,
/// antialiasing). Then turns stdin and stdout into the DevTools pipe's fds 3 and 4, and execs Chromium with the
/// arguments after it.
const LAUNCH: &str = r#"set -e
mkdir -p "$HOME"
if [ ! -e /etc/fonts/fonts.conf ]; then
  {
    printf '<?xml version="1.0"?>\n<fontconfig>\n<dir>/usr/share/fonts</dir>\n<cachedir>%s/fontconfig</cachedir>\n' "$HOME"
    for rule in 10-yes-antialias 10-hinting-slight 30-metric-aliases 45-generic 45-latin 49-sansserif \
        57-dejavu-sans 57-dejavu-serif 57-dejavu-sans-mono 60-generic 60-latin; do
      printf '<include ignore_missing="yes">/usr/share/fontconfig/conf.avail/%s.conf</include>\n' "$rule"
    done
    printf '</fontconfig>\n'
  } > "$HOME/fonts.conf"
  export FONTCONFIG_FILE="$HOME/fonts.conf"
fi
exec 3<&0 4>&1 </dev/null >/dev/null
exec "$@"
"#;

/// Flags for the sandbox's network: in a leashed sandbox, sandlot's proxy (names are the proxy's to resolve, and
/// a refused host fails the navigation); none in one with loopback only.
pub fn network_flags(leashed: bool) -> Vec<String> {
    match leashed {
        true => {
            vec![format!("--proxy-server=http://{}:{}", sandlot_egress::SERVICE_ADDRESS, sandlot_egress::PROXY_PORT)]
        }
        false => Vec::new(),
    }
}

/// Chromium's flags, the binary first; `leashed`: the sandbox is on an egress leash.
pub fn command_line(leashed: bool) -> Vec<String> {
    let (width, height) = VIEWPORT;
    let mut args: Vec<String> = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--remote-debugging-pipe",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-breakpad",
        "--disable-domain-reliability",
        "--disable-pings",
        "--metrics-recording-only",
        "--password-store=basic",
        "--use-mock-keychain",
        "--mute-audio",
        "--hide-scrollbars",
        "--media-router=0",
        "--disable-features=Translate,MediaRouter,OptimizationHints",
    ]
    .iter()
    .map(|flag| (*flag).to_owned())
    .collect();
    args.push(format!("--user-data-dir={BROWSER_HOME}/profile"));
    args.push(format!("--window-size={width},{height}"));
    args.extend(network_flags(leashed));
    args.push("about:blank".to_owned());
    args
}

/// The process to spawn in the live sandbox: bash running [`LAUNCH`] with [`command_line`].
pub fn spawn(leashed: bool) -> Spawn {
    let mut args = vec!["-c".to_owned(), LAUNCH.to_owned(), "sandlot-browser".to_owned()];
    args.extend(command_line(leashed));
    let env = BTreeMap::from([
        ("HOME".to_owned(), BROWSER_HOME.to_owned()),
        ("XDG_CONFIG_HOME".to_owned(), format!("{BROWSER_HOME}/config")),
        ("XDG_CACHE_HOME".to_owned(), format!("{BROWSER_HOME}/cache")),
    ]);
    Spawn { language: Language::Bash, args, env }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debugger_is_a_pipe_and_the_profile_is_in_tmp() {
        let line = command_line(false);
        assert_eq!(line[0], CHROMIUM);
        assert!(!line.iter().any(|flag| flag.starts_with("--proxy-server")));
        assert!(command_line(true).contains(&"--proxy-server=http://198.18.0.1:3128".to_owned()));
        assert!(line.contains(&"--remote-debugging-pipe".to_owned()));
        assert!(!line.iter().any(|flag| flag.starts_with("--remote-debugging-port")));
        assert!(line.contains(&"--user-data-dir=/tmp/.sandlot-browser/profile".to_owned()));
        assert_eq!(line.last().map(String::as_str), Some("about:blank"));
        let spawn = spawn(false);
        assert_eq!((spawn.language, spawn.args[0].as_str()), (Language::Bash, "-c"));
    }
}
