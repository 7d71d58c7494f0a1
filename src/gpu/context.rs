//! The wgpu device the GPU backend runs on: one it creates itself (command
//! line, tests, benchmarks) or one it is handed (Bevy's, in the app).

use super::kernels::Kernels;
use crate::model::config::Lab;
use std::fmt;

/// A device, its queue, and what we know about the adapter behind them.
#[derive(Clone)]
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// Why the device was lost (a driver reset, `destroy`), once it was;
    /// set by wgpu's device-lost callback on a device this program opened.
    pub lost: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Which matmul kernels backends on this device run (by shape unless
    /// `TINYGPT_MATMUL_TILE` says otherwise).
    pub matmul: super::matmul_tiles::MatmulChoice,
    /// The device is someone else's too (the app's renderer): a blocking
    /// read then waits by polling without blocking ([`GpuContext::wait_until`]).
    pub shared: bool,
    /// Whether the device was opened with the tensor cores
    /// ([`super::coop`], [`GpuContext::with_tensor_cores`]); Err: why not.
    pub tensor_cores: Result<(), String>,
    /// The kernels of the backends on this device, by (head size, lab
    /// switches): compiled once, each when first needed or warmed
    /// ([`GpuContext::kernels`], [`GpuContext::warm_kernels`]).
    kernels: KernelCache,
}

type KernelCache = std::sync::Arc<std::sync::Mutex<Vec<((usize, Lab), std::sync::Arc<Kernels>)>>>;

impl fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GpuContext({})", self.describe())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no GPU adapter found ({0}); install a Vulkan driver (on Linux without a GPU: \
         `apt-get install mesa-vulkan-drivers` for lavapipe) or use --backend cpu"
    )]
    NoAdapter(String),
    #[error("the GPU adapter {adapter} refused to open a device: {message}")]
    Device { adapter: String, message: String },
    #[error(
        "preset `{preset}` does not fit this GPU ({adapter}): {what} needs {need}, but the adapter's {limit} is {have}; choose a smaller preset or --backend cpu"
    )]
    Limit {
        preset: String,
        adapter: String,
        what: String,
        limit: &'static str,
        need: u64,
        have: u64,
    },
    #[error(
        "preset `{preset}` does not fit in the memory of {adapter}: its {bytes} bytes of buffers failed to allocate ({message}); choose a smaller preset or --backend cpu"
    )]
    OutOfMemory {
        preset: String,
        adapter: String,
        bytes: u64,
        message: String,
    },
    #[error(
        "WGPU_BACKEND={0} names no backend wgpu knows (vulkan, dx12, metal, gl, webgpu); unset it, or set it to one of those"
    )]
    BadBackendVariable(String),
    #[error("GPU error: {0}")]
    Other(String),
}

/// Refuses a `WGPU_BACKEND` that wgpu would ignore (it then looks on no
/// backend at all, and the error would blame a missing driver).
fn check_backend_variable() -> Result<(), GpuError> {
    let Some(value) = std::env::var_os("WGPU_BACKEND") else {
        return Ok(());
    };
    let value = value.to_string_lossy().into_owned();
    const KNOWN: [&str; 12] = [
        "vulkan", "vk", "dx12", "d3d12", "metal", "mtl", "opengl", "gles", "gl", "webgpu", "noop",
        "",
    ];
    let all_known = value
        .to_lowercase()
        .split(',')
        .all(|b| KNOWN.contains(&b.trim()));
    if all_known && !value.trim().is_empty() {
        Ok(())
    } else {
        Err(GpuError::BadBackendVariable(value))
    }
}

/// `TINYGPT_MATMUL_TILE`'s choice; a bad name is said once and ignored.
fn matmul_choice() -> super::matmul_tiles::MatmulChoice {
    super::matmul_tiles::MatmulChoice::from_env().unwrap_or_else(|why| {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| eprintln!("{why}"));
        Default::default()
    })
}

impl GpuContext {
    /// Opens the best adapter wgpu finds (`WGPU_BACKEND` and
    /// `WGPU_ADAPTER_NAME` choose), with every limit the adapter offers.
    pub async fn new() -> Result<Self, GpuError> {
        Self::open(false).await
    }

    /// As [`GpuContext::new`], and with the tensor cores where the adapter
    /// has them ([`super::coop::adapter_support`]): wgpu's experimental
    /// cooperative matrices and f16. Only what asks for them opens a device
    /// so (`tinygpt bench --matmul`); [`GpuContext::tensor_cores`] says
    /// whether it got them, or why not.
    pub async fn with_tensor_cores() -> Result<Self, GpuError> {
        Self::open(true).await
    }

    async fn open(tensor_cores: bool) -> Result<Self, GpuError> {
        check_backend_variable()?;
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let options = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        };
        let adapter = match wgpu::util::initialize_adapter_from_env(&instance, None).await {
            Ok(a) => a,
            Err(_) => instance.request_adapter(&options).await.map_err(|e| {
                GpuError::NoAdapter(match std::env::var("WGPU_BACKEND") {
                    Ok(b) => format!("{e}; WGPU_BACKEND={b} limits the search to that backend"),
                    Err(_) => e.to_string(),
                })
            })?,
        };
        let info = adapter.get_info();
        let mut features = wgpu::Features::empty();
        if adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            features |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let cores = if tensor_cores {
            super::coop::adapter_support(&adapter)
        } else {
            Err("the device was opened without the tensor cores (only `tinygpt bench --matmul` asks for them)".into())
        };
        if cores.is_ok() {
            features |= super::coop::FEATURES;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("tinygpt:device"),
                required_features: features,
                required_limits: adapter.limits(),
                // SAFETY: wgpu asks us to acknowledge that its experimental
                // features may hold bugs; only a device asked to have the
                // tensor cores, on an adapter that offers them, turns them on.
                experimental_features: if cores.is_ok() {
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::Device {
                adapter: info.name.clone(),
                message: e.to_string(),
            })?;
        let limits = device.limits();
        let lost: std::sync::Arc<std::sync::Mutex<Option<String>>> = Default::default();
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut lost) = flag.lock() {
                lost.get_or_insert(if message.is_empty() {
                    format!("{reason:?}")
                } else {
                    format!("{reason:?}: {message}")
                });
            }
        });
        // Errors on a lost device are expected (every command fails); the
        // trainer reads `lost` and stops. Any other error is a bug: loud.
        let flag = lost.clone();
        device.on_uncaptured_error(std::sync::Arc::new(move |error: wgpu::Error| {
            let lost = flag.lock().map(|l| l.is_some()).unwrap_or(false);
            if !lost {
                panic!("wgpu error: {error}");
            }
        }));
        Ok(Self {
            device,
            queue,
            info,
            limits,
            lost,
            matmul: matmul_choice(),
            shared: false,
            tensor_cores: cores,
            kernels: Default::default(),
        })
    }

    /// Runs every matmul of the backends built on this context from now on
    /// on the tensor cores (`--precision mixed`: f16 operands, f32
    /// accumulation, the loss scaled), where the device was opened with them
    /// ([`GpuContext::with_tensor_cores`]); Err: why not, in a sentence.
    /// (Where they pay: [`super::matmul_tiles::coop_pays`]; every matmul
    /// with `TINYGPT_COOP_EVERYWHERE=1`.)
    pub fn use_tensor_cores(&mut self) -> Result<(), String> {
        use super::matmul_tiles::MatmulChoice;
        self.tensor_cores.clone()?;
        self.matmul = if std::env::var("TINYGPT_COOP_EVERYWHERE").is_ok_and(|v| v == "1") {
            MatmulChoice::CoopEverywhere
        } else {
            MatmulChoice::Coop
        };
        Ok(())
    }

    /// Whether the matmuls run on the tensor cores ([`GpuContext::use_tensor_cores`]).
    pub fn mixed_precision(&self) -> bool {
        self.matmul.tensor_cores()
    }

    /// The kernels for models with this head size and lab switches on this
    /// device, shared by its backends (their pipelines compiled once).
    pub fn kernels(&self, head_dim: usize, lab: Lab) -> std::sync::Arc<Kernels> {
        let mut cache = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = cache.iter().find(|(key, _)| *key == (head_dim, lab)) {
            return k.clone();
        }
        let k = std::sync::Arc::new(Kernels::lazy(&self.device, head_dim, lab));
        cache.push(((head_dim, lab), k.clone()));
        k
    }

    /// Compiles one pipeline a backend on this device will run and has not
    /// compiled yet; false when all are ready. The app calls it once a
    /// frame, so that compiling does not hold one frame for all of them
    /// (in a page, seconds without a frame on a software GPU: see
    /// [`Kernels`]).
    pub fn warm_kernels(&self) -> bool {
        let sets: Vec<_> = {
            let cache = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
            cache.iter().map(|(_, k)| k.clone()).collect()
        };
        sets.iter().any(|k| k.warm_next())
    }

    /// Whether the device times passes with timestamp queries (opened with
    /// them where the adapter has them; a browser may not grant them).
    pub fn has_timestamps(&self) -> bool {
        self.device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// Why the device was lost, if it was.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }

    /// `TINYGPT_TEST_LOSE_GPU_AFTER=N`, the tests' way to lose the device
    /// as a driver reset would: `train` and the app destroy it after N
    /// steps, `generate` before its (N+1)-th forward pass.
    pub fn test_lose_after() -> Option<u64> {
        std::env::var("TINYGPT_TEST_LOSE_GPU_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
    }

    /// Opens a device and blocks until it is ready (not for the browser).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking() -> Result<Self, GpuError> {
        pollster::block_on(Self::new())
    }

    /// [`GpuContext::with_tensor_cores`], blocking (not for the browser).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_tensor_cores_blocking() -> Result<Self, GpuError> {
        pollster::block_on(Self::with_tensor_cores())
    }

    /// Wraps a device someone else opened (Bevy's `RenderDevice`).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> Self {
        let limits = device.limits();
        Self {
            device,
            queue,
            info,
            limits,
            lost: Default::default(),
            matmul: matmul_choice(),
            shared: true,
            tensor_cores: Err("the app's renderer opened this device without the tensor cores".into()),
            kernels: Default::default(),
        }
    }

    /// Blocks until `done()` (a map's callback has run, the queue's work is
    /// done), polling the device; Err when the device is lost first. On a
    /// device of its own wgpu waits; on a shared device (the app's, where a
    /// worker computes beside the renderer) it polls without waiting and
    /// yields between polls: wgpu holds the device's fence while a poll
    /// waits, and every frame's submit would queue behind the wait (the
    /// flow scene's frames went from 17 to 30–35 ms while xl trained on the
    /// H100 host).
    pub fn wait_until(&self, mut done: impl FnMut() -> bool) -> Result<(), ()> {
        let started = web_time::Instant::now();
        loop {
            let poll = if self.shared {
                wgpu::PollType::Poll
            } else {
                wgpu::PollType::wait_indefinitely()
            };
            let polled = self.device.poll(poll);
            if done() {
                return Ok(());
            }
            if polled.is_err() || self.lost().is_some() {
                return Err(());
            }
            if self.shared {
                pause(started);
            }
        }
    }

    /// Blocks until the work submitted to the queue so far is done
    /// ([`GpuContext::wait_until`]).
    pub fn wait_for_queue(&self) {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let set = flag.clone();
        self.queue
            .on_submitted_work_done(move || set.store(true, std::sync::atomic::Ordering::Release));
        let _ = self.wait_until(|| flag.load(std::sync::atomic::Ordering::Acquire));
    }

    /// e.g. `NVIDIA H100 80GB HBM3 (Vulkan, DiscreteGpu)`
    pub fn describe(&self) -> String {
        // Browsers do not tell the adapter's name.
        let name = if self.info.name.is_empty() {
            "unnamed adapter"
        } else {
            &self.info.name
        };
        format!(
            "{name} ({:?}, {:?})",
            self.info.backend, self.info.device_type
        )
    }
}

/// Between two polls of a shared device: a yield for the first two
/// milliseconds of a wait (a short wait keeps its latency), then a sleep of
/// 50 µs (a long one does not spin a core).
pub(crate) fn pause(started: web_time::Instant) {
    #[cfg(not(target_arch = "wasm32"))]
    if started.elapsed().as_secs_f64() < 2e-3 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    #[cfg(target_arch = "wasm32")]
    let _ = started;
}
