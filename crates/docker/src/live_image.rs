//! The image live sandboxes are made from: the newest labelled `sandbox.live=true` (runner-live). Found when the
//! backend connects; without one, the backend keeps no live sandboxes (`Backend::live` is `None`).

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::ListImagesOptionsBuilder;

use crate::{Error, Result};

/// The label of the image live sandboxes are made from.
pub(crate) const IMAGE_LABEL: &str = "sandbox.live=true";

/// The most recently created image labelled [`IMAGE_LABEL`], if any.
pub(crate) async fn find_image(docker: &Docker) -> Result<Option<String>> {
    let filters = HashMap::from([("label", vec![IMAGE_LABEL])]);
    let options = ListImagesOptionsBuilder::default().filters(&filters).build();
    let mut images = docker.list_images(Some(options)).await.map_err(|e| Error::engine("list images", e))?;
    images.sort_by_key(|image| std::cmp::Reverse(image.created));
    Ok(images.into_iter().next().map(|image| image.repo_tags.first().cloned().unwrap_or(image.id)))
}
