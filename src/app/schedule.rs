//! The app's system sets in `Update`, in the order they run.

use bevy::prelude::*;

/// The app's system sets in `Update`, in the order they run (chained once,
/// in [`super::add_explainer_plugins`]): input from files and the page, the
/// run's commands and training, the entity mirror of the program, the scene
/// camera, then the scenes.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AppSystems {
    Input,
    Training,
    Graph,
    Camera,
    Scene,
}

/// Runs work that blocks for seconds (the Speedup scene's measurements) off
/// the frame. Natively on a thread of its own (`blocking`'s pool), not in
/// Bevy's async-compute pool: that pool has one thread on a two-core
/// machine, and the renderer compiles its pipelines there, so a bench in it
/// left a lesson's first frames blank until the bench ended. In the page,
/// a task on its one thread (the work awaits [`next_frame`] between chunks).
#[cfg(not(target_arch = "wasm32"))]
pub fn spawn_blocking_work<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> bevy::tasks::Task<T> {
    blocking::unblock(move || bevy::tasks::block_on(work))
}

/// See the native [`spawn_blocking_work`].
#[cfg(target_arch = "wasm32")]
pub fn spawn_blocking_work<T: 'static>(
    work: impl std::future::Future<Output = T> + 'static,
) -> bevy::tasks::Task<T> {
    bevy::tasks::AsyncComputeTaskPool::get().spawn(work)
}

/// Counts the frames begun, for [`next_frame`].
static FRAME: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The tasks waiting for the next frame.
static WAITING: std::sync::Mutex<Vec<std::task::Waker>> = std::sync::Mutex::new(Vec::new());

/// A future ready once the next frame has begun: how work on the page's one
/// thread (the Speedup scene's bench) hands control back to the browser
/// between chunks, so the page keeps drawing. (A future that woke itself at
/// once would keep the thread: the browser's tasks, a GPU readback among
/// them, run only when control goes back.)
pub fn next_frame() -> NextFrame {
    NextFrame {
        after: FRAME.load(std::sync::atomic::Ordering::Acquire),
    }
}

/// See [`next_frame`].
pub struct NextFrame {
    after: u64,
}

impl std::future::Future for NextFrame {
    type Output = ();
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let began = || FRAME.load(std::sync::atomic::Ordering::Acquire) > self.after;
        if began() {
            return std::task::Poll::Ready(());
        }
        WAITING.lock().unwrap().push(cx.waker().clone());
        // A frame that began while the waker went in has woken the others.
        if began() {
            return std::task::Poll::Ready(());
        }
        std::task::Poll::Pending
    }
}

/// Begins a frame for [`next_frame`]: wakes the tasks waiting for it.
fn begin_frame() {
    FRAME.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    for waker in std::mem::take(&mut *WAITING.lock().unwrap()) {
        waker.wake();
    }
}

/// Wakes what waits for [`next_frame`] at the start of every frame.
pub struct FramesPlugin;

impl Plugin for FramesPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(First, begin_frame);
    }
}
