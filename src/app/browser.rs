//! The browser's services the app uses on wasm32, through the page's
//! `window.tinygptHost` (defined by `web/index.html` before it loads the
//! wasm): whether it found WebGPU, the URL fragment, files the user gave the
//! page, downloads, the file chooser and the report the page shows. Also the
//! window (the page's canvas) and the renderer the app asks for. The page's
//! side of the app (start, link, report) is [`super::web`].

use bevy::prelude::*;
use bevy::render::settings::{Backends, RenderCreation, WgpuSettings, WgpuSettingsPriority};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// Whether the page found a WebGPU adapter (it asks before loading us).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = hasWebGpu)]
    pub fn has_webgpu() -> bool;
    /// The URL fragment, without `#`.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = getFragment)]
    pub fn get_fragment() -> String;
    /// Whether the page is a secure context (https or localhost): the
    /// browser gives WebGPU to those only.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = isSecureContext)]
    pub fn is_secure_context() -> bool;
    /// The class's WebSocket address, where the page was served by
    /// `tinygpt class`.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = classSocketUrl)]
    pub fn class_socket_url() -> String;
    /// Replaces the URL fragment (no new history entry).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = setFragment)]
    pub fn set_fragment(fragment: &str);
    /// The page's size in CSS pixels.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = pageWidth)]
    fn page_width() -> f64;
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = pageHeight)]
    fn page_height() -> f64;
    /// The name of the next file the user gave the page, if any…
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = takeFileName)]
    pub fn take_file_name() -> Option<String>;
    /// …and its bytes (taken together with the name).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = takeFileBytes)]
    pub fn take_file_bytes() -> Vec<u8>;
    /// Opens the browser's file chooser.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = openFilePicker)]
    pub fn open_file_picker();
    /// Offers bytes as a download named `name`.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = download)]
    pub fn host_download(name: &str, bytes: &[u8]);
    /// Starts fetching a gallery model's checkpoint (and its text, unless
    /// `text` is empty) from the files beside the page, through the
    /// browser's cache.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = fetchGallery)]
    pub fn fetch_gallery(id: &str, checkpoint: &str, text: &str);
    /// The fetch as JSON: `{"id", "got", "total", "done", "error"}`, or `{}`.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = galleryProgress)]
    pub fn gallery_progress() -> String;
    /// A fetched file's bytes (`"checkpoint"` or `"text"`), taken once.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = takeGalleryFile)]
    pub fn take_gallery_file(part: &str) -> Vec<u8>;
    /// Starts fetching a font from beside the page (through the
    /// browser's cache): the CJK font, when Chinese is chosen.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = fetchFont)]
    pub fn fetch_font(path: &str);
    /// The fetched font's bytes once they are here (taken once), else none.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = takeFont)]
    pub fn take_font() -> Vec<u8>;
    /// Why the font fetch failed, or nothing.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = fontError)]
    pub fn font_error() -> String;
    /// The app's state as JSON, for the page and for tests.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = report)]
    pub fn report(status: &str);
    /// The page's `prefers-reduced-motion: reduce` (src/app/access/motion.rs).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = prefersReducedMotion)]
    pub fn prefers_reduced_motion() -> bool;
    /// The accessibility tree as JSON: the page mirrors it into hidden
    /// elements inside the canvas (src/app/access/tree.rs).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = accessTree)]
    pub fn access_tree(json: &str);
    /// A press on one of the mirror's buttons: the node's id.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = takeAccessAction)]
    pub fn take_access_action() -> Option<String>;
    /// Says `text` through the page's polite live region.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = announce)]
    pub fn announce(text: &str);
    /// Threads the page's CPU trainer worker would train on (0: the page
    /// is not cross-origin isolated, or has one core; src/app/remote.rs).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerThreads)]
    pub fn trainer_threads() -> u32;
    /// Hands the run to the worker (started, with its thread pool, on the
    /// first call): a checkpoint with AdamW's moments and the corpus.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerStart)]
    pub fn trainer_start(checkpoint: &[u8], name: &str, train: &[u8], val: &[u8], align: u32);
    /// Asks the worker for up to `steps` steps of about `budget_ms`.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerSteps)]
    pub fn trainer_steps(steps: u32, budget_ms: f64);
    /// Asks the worker for tensors by name (a JSON list).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerRead)]
    pub fn trainer_read(names_json: &str);
    /// Asks the worker for the run back (a checkpoint).
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerRecall)]
    pub fn trainer_recall();
    /// The worker's next reply as JSON, or nothing; its bulk, taken next:
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerTake)]
    pub fn trainer_take() -> Option<String>;
    /// …a checkpoint's bytes…
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerTakeBytes)]
    pub fn trainer_take_bytes() -> Vec<u8>;
    /// …or a read's values.
    #[wasm_bindgen(js_namespace = tinygptHost, js_name = trainerTakeFloats)]
    pub fn trainer_take_floats() -> Vec<f32>;
}

/// Offers bytes as a download (how the browser build saves checkpoints).
pub fn download(name: &str, bytes: &[u8]) {
    host_download(name, bytes);
}

/// Why the browser build trains on the CPU when it has no WebGPU: over
/// plain http (not localhost) the browser gives the page none, whatever it
/// has (a class served to the classroom's network, `docs/guide/class.md`).
pub fn no_webgpu() -> String {
    let threads = trainer_threads();
    if is_secure_context() && threads > 0 {
        // Cross-origin isolated: the CPU trains in the trainer worker
        // (src/app/remote.rs).
        crate::t!("browser-no-webgpu-worker", threads = threads.to_string())
    } else if is_secure_context() {
        crate::t!("browser-no-webgpu")
    } else {
        crate::t!("browser-no-webgpu-http")
    }
}

/// The window: the page's canvas, sized to its parent, and from its first
/// frame the page's size (Bevy's default 1280×720 is 2560×1440 device
/// pixels on a phone or HiDPI screen: more than WebGL2's 2048-pixel
/// surfaces, and a surface that could never be configured panicked on the
/// first frame).
pub fn window() -> Window {
    let (w, h) = (page_width(), page_height());
    let size = |v: f64| if v.is_finite() && v >= 1.0 { v.round() as u32 } else { 1 };
    Window {
        title: "TinyGPT Explainer".into(),
        canvas: Some("#tinygpt".into()),
        fit_canvas_to_parent: true,
        resolution: bevy::window::WindowResolution::new(size(w), size(h)),
        // Let the page keep its own keys (reload, zoom, tab).
        prevent_default_event_handling: false,
        ..default()
    }
}

/// The renderer: WebGPU with the adapter's own limits (the kernels want
/// more than WebGPU's defaults for the larger presets), or WebGL2 where the
/// page found no WebGPU adapter, also with the adapter's own limits (its
/// largest texture, 4096 to 16384 pixels on phones and laptops, bounds the
/// canvas: WebGL2's guaranteed 2048 is less than a phone's screen in device
/// pixels).
pub fn render_creation() -> RenderCreation {
    let settings = if has_webgpu() {
        WgpuSettings {
            backends: Some(Backends::BROWSER_WEBGPU),
            priority: WgpuSettingsPriority::Functionality,
            ..default()
        }
    } else {
        WgpuSettings {
            backends: Some(Backends::GL),
            priority: WgpuSettingsPriority::Functionality,
            limits: wgpu::Limits::downlevel_webgl2_defaults(),
            ..default()
        }
    };
    RenderCreation::Automatic(Box::new(settings))
}
