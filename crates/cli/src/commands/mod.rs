//! One module per subcommand.

mod doctor;
mod egress;
mod mcp_config;
mod run;
mod runners;
mod serve;
mod stdio;

use std::process::ExitCode;
use std::sync::Arc;

use sandlot_jail::{JailBackend, JailConfig, ProcessModel};

use crate::cli::{BackendKind, Cli, Command, FileUrlArgs, SandboxArgs, ServiceArgs};

/// Runs the chosen subcommand; `forked_init` is the jail init `run` forked before the runtime started.
pub async fn dispatch(cli: Cli, forked_init: Option<sandlot_jail::ForkedInit>) -> ExitCode {
    let result = match cli.command {
        Command::Run(args) => run::run(args, forked_init).await,
        Command::Runners(args) => runners::runners(args),
        Command::Doctor(args) => doctor::doctor(args).await,
        Command::Serve(args) => serve::serve(*args).await,
        Command::Stdio(args) => stdio::stdio(*args).await,
        Command::McpConfig(args) => mcp_config::mcp_config(args),
    };
    result.unwrap_or_else(|e| {
        crate::logs::fail(&format!("{e:#}"));
        ExitCode::from(1)
    })
}

/// The native backend, for the given languages (all when empty), with versions probed or not, for `model`. A server
/// caches the sandbox's skeleton under its root and keeps conversations' network namespaces (`--keep-netns`); one
/// that `serves` runs (not `doctor`'s probe) keeps Python templates (`--python-template`).
pub fn jail_backend(
    sandbox: &SandboxArgs,
    languages: Option<Vec<sandlot_core::Language>>,
    probe_versions: bool,
    model: ProcessModel,
    serves: bool,
    egress: Option<Arc<sandlot_egress::Egress>>,
) -> anyhow::Result<Arc<JailBackend>> {
    let exe = std::env::current_exe().map_err(|e| anyhow::anyhow!("cannot find the sandlot binary: {e}"))?;
    let server = matches!(model, ProcessModel::Server { .. });
    let mut config = JailConfig::new(exe);
    config.model = model;
    config.sandbox_uids = sandbox.sandbox_uid_range();
    config.probe_versions = probe_versions;
    config.keep_netns = server && sandbox.keep_netns;
    let preload = sandbox.python_preload.iter().map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()).collect();
    config.python_preload = (server && serves && sandbox.python_template).then_some(preload);
    config.prepared_sandboxes = sandbox.prepared_sandboxes as usize;
    config.prepared_live_sandboxes = sandbox.prepared_live_sandboxes as usize;
    config.ahead_sandboxes = if server && serves { sandbox.ahead_sandboxes as usize } else { 0 };
    config.skeleton_dir = server.then(|| sandbox.root.join(sandlot_jail::SKELETON_DIR_NAME));
    config.data_root = Some(sandbox.root.clone());
    config.tune_cgroups = sandbox.tune_cgroups;
    config.egress = egress.map(sandlot_jail::EgressHandle);
    if let Some(languages) = languages {
        config.languages = languages;
    }
    let backend = JailBackend::new(config).map_err(|e| anyhow::anyhow!("the native backend cannot start: {e}"))?;
    Ok(Arc::new(backend))
}

/// Checks the file-URL settings before anything is started; the error names the variable.
pub fn check_file_url_args(files: &FileUrlArgs) -> Result<(), String> {
    if files.file_secret.as_deref() == Some("") {
        return Err("FILE_SECRET must not be empty".into());
    }
    if let Some(url) = &files.public_base_url {
        let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        if rest.is_none_or(|rest| rest.trim_end_matches('/').is_empty() || rest.contains(['?', '#', ' '])) {
            return Err(format!("invalid PUBLIC_BASE_URL={url:?}: expected http(s)://host[:port][/path]"));
        }
    }
    Ok(())
}

/// The backend `--backend` names: the native jail (with `warm_inits` inits kept ready) or Docker.
pub async fn backend(
    sandbox: &SandboxArgs,
    warm_inits: usize,
    egress: Option<Arc<sandlot_egress::Egress>>,
) -> anyhow::Result<Arc<dyn sandlot_core::Backend>> {
    Ok(match sandbox.backend {
        BackendKind::Native => {
            let backend = jail_backend(sandbox, None, true, ProcessModel::Server { warm_inits }, true, egress)?;
            backend.warm_up();
            backend.prepare_for(&sandbox.limits());
            backend
        }
        BackendKind::Docker => {
            std::fs::create_dir_all(&sandbox.root)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", sandbox.root.display()))?;
            let owner = std::fs::canonicalize(&sandbox.root).unwrap_or_else(|_| sandbox.root.clone());
            let config = sandlot_docker::DockerConfig::new(owner.display().to_string());
            let backend = sandlot_docker::DockerBackend::connect(config)
                .await
                .map_err(|e| anyhow::anyhow!("the docker backend is unavailable: {e}"))?;
            Arc::new(backend)
        }
    })
}

/// The state every server face shares: an engine over the chosen backend, with its queue and its history
/// (`<root>/.sandlot/history.db`, or the PostgreSQL database of `SANDLOT_HISTORY_URL`), and the file-URL signer. What a crashed predecessor left behind is cleaned up first.
/// Starts the retention task ([`sandlot_core::keep_tidy`]) and, with a shared history, the node's lease
/// ([`sandlot_core::hold_lease`]); both end with the state's shutdown token.
pub async fn app_state(
    sandbox: &SandboxArgs,
    service: &ServiceArgs,
    files: &FileUrlArgs,
    default_base_url: &str,
    warm_inits: usize,
) -> anyhow::Result<sandlot_server::AppState> {
    let egress = egress::start(&service.egress, sandbox.backend).await?;
    let backend = backend(sandbox, warm_inits, egress.clone()).await?;
    let workspaces =
        with_disk_images(sandlot_core::Workspaces::with_bounds(&sandbox.root, service.conversation_bounds()), sandbox);
    std::fs::create_dir_all(&sandbox.root)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", sandbox.root.display()))?;
    // On stderr, for `stdio` too (its stdout is the protocol); in JSON mode as an event (every line is JSON; `serve`'s
    // start event names the root again).
    if crate::logs::json() {
        tracing::info!(root = %sandbox.root.display(), "data root");
    } else {
        crate::logs::say(&format!("data root {}", sandbox.root.display()));
    }
    let state = sandlot_core::StateDir::prepare(&sandbox.root)?;
    let secret = match &files.file_secret {
        Some(secret) => secret.clone().into_bytes(),
        None => file_secret(&state.file_secret())?,
    };
    let public_base_url = files.public_base_url.clone().unwrap_or_else(|| default_base_url.to_owned());
    let history = match &service.history_url {
        Some(url) => sandlot_core::History::connect(url, service.store_code)?,
        None => sandlot_core::History::open(state.history(), service.store_code)?,
    }
    .with_output_budget(service.history_output_mb * 1024 * 1024);
    let mut config = service.apply(sandbox.engine_config());
    config.egress = egress::policies(&service.egress, egress.as_deref())?;
    let engine = sandlot_core::Engine::new(backend, workspaces, config).with_history(history);
    let interrupted = engine.recover().await?;
    for run_id in &interrupted {
        tracing::warn!(run_id, "run interrupted: it was in flight when the previous server stopped");
    }
    let app = sandlot_server::AppState {
        engine: Arc::new(engine),
        files: sandlot_server::FileUrls {
            signer: sandlot_core::Signer::new(secret),
            public_base_url: public_base_url.trim_end_matches('/').to_owned(),
            ttl: (files.file_url_ttl_secs > 0).then(|| std::time::Duration::from_secs(files.file_url_ttl_secs)),
        },
        shutdown: Default::default(),
        tool_names: service.tool_names.into(),
        resource_read_bytes: service.resource_read_bytes,
        scrub_secrets: service.scrub_secrets,
    };
    tokio::spawn(sandlot_core::keep_tidy(app.engine.clone(), service.retention(), app.shutdown.clone()));
    tokio::spawn(sandlot_core::hold_lease(app.engine.clone(), app.shutdown.clone()));
    Ok(app)
}

/// `workspaces` with each conversation on a disk image of its own where the host allows (the kernel's bound on
/// `/data`; see `sandlot_core::DiskImages`), else plain directories the quota's watchdog walks.
pub fn with_disk_images(workspaces: sandlot_core::Workspaces, sandbox: &SandboxArgs) -> sandlot_core::Workspaces {
    images_or_not(workspaces, sandlot_core::DiskImages::detect(sandbox.disk_mb, sandbox.disk_inodes), sandbox)
}

/// [`with_disk_images`] for one run into `conversation`: when its image is mounted already, loop mounts work here
/// and the probe is skipped (a `sandlot run` into a conversation used before pays no test image).
pub fn with_disk_images_for(
    workspaces: sandlot_core::Workspaces,
    sandbox: &SandboxArgs,
    conversation: &str,
) -> sandlot_core::Workspaces {
    let mounted = sandlot_core::ConversationId::parse(conversation)
        .is_ok_and(|id| sandlot_core::image_is_mounted(&workspaces.files_dir(&id)).unwrap_or(false));
    let images = match mounted {
        true => sandlot_core::DiskImages::find(sandbox.disk_mb, sandbox.disk_inodes),
        false => sandlot_core::DiskImages::detect(sandbox.disk_mb, sandbox.disk_inodes),
    };
    images_or_not(workspaces, images, sandbox)
}

fn images_or_not(
    workspaces: sandlot_core::Workspaces,
    images: Result<sandlot_core::DiskImages, String>,
    sandbox: &SandboxArgs,
) -> sandlot_core::Workspaces {
    match images {
        Ok(images) => match &sandbox.node_name {
            Some(node) => workspaces.with_images(images.on_node(node)),
            None => workspaces.with_images(images),
        },
        Err(why) => {
            tracing::info!("no disk images for conversations ({why}): the quota's watchdog walks /data");
            workspaces
        }
    }
}

/// The file-URL secret kept at `path` (`<root>/.sandlot/file-secret`; created, mode 0600, on first use).
fn file_secret(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(secret) = std::fs::read(path)
        && !secret.is_empty()
    {
        return Ok(secret);
    }
    let secret = random_token().into_bytes();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    file.write_all(&secret)?;
    Ok(secret)
}

/// A random token: two UUIDv4s as hex (244 random bits).
pub fn random_token() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// How long a server that exits waits for its backend to remove what would outlive it (the Docker backend's
/// containers; it bounds its own wait at 30 s, this is the bound should the engine stop answering at all).
const ABORT_BOUND: std::time::Duration = std::time::Duration::from_secs(40);

/// Before a server exits: removes the sandboxes of runs still going that would outlive this process, and waits for
/// that within [`ABORT_BOUND`]. A server that exits has removed its containers.
/// Then unmounts the conversations' disk images no run holds (see `Workspaces::unmount_images`).
pub async fn abort_all(engine: &sandlot_core::Engine) {
    if tokio::time::timeout(ABORT_BOUND, engine.abort_all()).await.is_err() {
        tracing::error!(bound_secs = ABORT_BOUND.as_secs(), "the backend did not remove its sandboxes in time");
    }
    let workspaces = engine.workspaces().clone();
    let _ = tokio::task::spawn_blocking(move || workspaces.unmount_images()).await;
}
