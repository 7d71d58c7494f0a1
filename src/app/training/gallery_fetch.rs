//! A gallery model being fetched by the page (browser builds): what the
//! run's commands start and [`crate::app::gallery`] follows.

use bevy::prelude::*;

/// A gallery model on its way from the page's server.
#[derive(Resource, Default, Debug)]
pub struct GalleryFetch {
    /// The entry being fetched.
    pub id: Option<String>,
    /// Bytes received and expected so far (expected 0 while unknown).
    pub progress: (u64, u64),
}

impl GalleryFetch {
    /// Asks the page for `entry`'s files; a later request replaces it.
    #[allow(unused_variables)]
    pub fn request(&mut self, entry: &crate::model::gallery::Entry) -> Result<(), String> {
        #[cfg(target_arch = "wasm32")]
        {
            let text = match entry.text {
                crate::model::gallery::Text::File { path, .. } => path,
                _ => "",
            };
            crate::app::browser::fetch_gallery(entry.id, entry.file, text);
            self.id = Some(entry.id.to_string());
            self.progress = (0, 0);
            Ok(())
        }
        #[cfg(not(target_arch = "wasm32"))]
        Err(format!(
            "the gallery's {} is not in this build and only a browser fetches it",
            entry.id
        ))
    }
}
