//! The app in a live class (issue 57): a student's page or the teacher's,
//! joined to `tinygpt class` through one WebSocket (ewebsock: the
//! browser's WebSocket on the web, a tungstenite thread natively).
//!
//! - A **student** follows the teacher: the lesson opens locked (as a
//!   workshop link), on the teacher's step; while the class is paced they
//!   cannot go past it; their answer to a question goes to the teacher and
//!   the right answer stays hidden until the teacher reveals it, with the
//!   class's counts; a paused class dims their screen.
//! - The **teacher** moves through the lesson as usual (every student
//!   follows) and has the class panel ([`panel`]): the students, the
//!   answers as bars filling live, reveal, pace, pause, "send my view",
//!   the CSV, end.
//!
//! Nothing is lost to a dropped connection: the page reconnects (a student
//! into their seat: the link keeps it, so a reload rejoins too) and sends
//! again an answer the server had not acknowledged.

pub mod experiment;
pub mod panel;

use super::lesson::{LessonAction, LessonFocus, LessonPlayer, PendingFocus, ShownView};
use super::link::ClassLink;
use super::scenes::Scene;
use crate::class::protocol::{ClassState, Dashboard, Role, SharedView, ToClient, ToServer};
use bevy::prelude::*;
use std::collections::BTreeMap;
use web_time::{Duration, Instant};

/// How the page stands with its class.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Status {
    /// Not in a class.
    #[default]
    Off,
    Connecting,
    /// Admitted.
    In,
    /// The connection dropped: reconnecting (why).
    Lost(String),
    /// The server refused the page (a wrong code or link): why. No retry.
    Refused(String),
    /// The teacher ended the class.
    Ended,
}

/// The class this page is in.
#[derive(Resource, Default)]
pub struct ClassClient {
    /// The link it joined with (a student's seat is added once given).
    pub link: Option<ClassLink>,
    /// `ws://host:port/class/ws`.
    pub socket_url: String,
    pub status: Status,
    pub role: Option<Role>,
    /// The built-in lesson the class runs.
    pub lesson: Option<String>,
    pub state: Option<ClassState>,
    /// The teacher's dashboard.
    pub board: Dashboard,
    /// A student's answers on record on the server (step → choice).
    pub accepted: BTreeMap<usize, usize>,
    /// … and sent, not yet acknowledged.
    pending: BTreeMap<usize, usize>,
    outbox: Vec<ToServer>,
    /// The class experiment: a student's part and run, the teacher's curves.
    pub experiment: experiment::ExperimentPage,
    /// The step last reported (a student's `at`) or sent (the teacher's `goto`).
    reported: Option<usize>,
    /// The class's step this page last moved to.
    followed: Option<usize>,
    /// The teacher's view to show (a student).
    view: Option<SharedView>,
    /// What the scene shows ([`ShownView`], copied for the class panel:
    /// the teacher's "send my view"; and for the report: a student's shows
    /// the teacher's view arrived).
    pub shown: ShownView,
    /// The last refusal's reason, shown until the next change.
    pub refusal: Option<String>,
    retry_at: Option<Instant>,
    attempts: u32,
    /// Where the class panel drew *Reveal the answers* (physical pixels),
    /// for the reports (the browser test clicks it).
    pub reveal_rect: Option<bevy_egui::egui::Rect>,
    /// The teacher's last `goto` and when it left (ms since the epoch), and
    /// when a new step of the class arrived here: what the browser test
    /// times (the pages' clocks are one machine's).
    goto_sent: Option<(usize, u64)>,
    step_arrived: Option<(usize, u64)>,
}

/// The socket itself (not `Send` in the browser, so a non-send resource).
#[derive(Default)]
pub struct ClassSocket {
    pair: Option<(ewebsock::WsSender, ewebsock::WsReceiver)>,
    /// When the socket's last message arrived (ms since the Unix epoch),
    /// stamped as it arrives, not when a frame reads it.
    arrived_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Milliseconds since the Unix epoch (the same clock in every page).
fn now_ms() -> u64 {
    web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ClassClient {
    /// A page joining `link` through the socket at `socket_url`.
    pub fn joining(link: ClassLink, socket_url: String) -> ClassClient {
        ClassClient {
            link: Some(link),
            socket_url,
            status: Status::Connecting,
            ..Default::default()
        }
    }

    pub fn is_student(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.teacher.is_none())
    }

    pub fn is_teacher(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.teacher.is_some())
    }

    /// Queues a message for the server (sent once admitted).
    pub fn send(&mut self, msg: ToServer) {
        self.outbox.push(msg);
    }

    /// The first message: who this page is.
    fn hello(&self) -> Option<ToServer> {
        let link = self.link.as_ref()?;
        Some(match &link.teacher {
            Some(token) => ToServer::Teach { token: token.clone() },
            None => ToServer::Join {
                code: link.code.clone(),
                nickname: link.name.clone(),
                seat: link.seat.clone(),
            },
        })
    }

    fn lost(&mut self, why: String) {
        match &self.status {
            Status::Refused(_) | Status::Ended => {}
            _ => {
                self.status = Status::Lost(why);
                let wait = Duration::from_millis((500u64 << self.attempts.min(4)).min(8000));
                self.retry_at = Some(Instant::now() + wait);
                self.attempts += 1;
            }
        }
    }

    fn receive(&mut self, msg: ToClient, files: &mut MessageWriter<super::export::ExportFile>) {
        match msg {
            ToClient::Welcome { role, lesson, code, seat, answers } => {
                self.status = Status::In;
                self.role = Some(role);
                self.lesson = Some(lesson);
                self.refusal = None;
                self.attempts = 0;
                if let Some(link) = self.link.as_mut() {
                    link.code = code;
                    if seat.is_some() {
                        link.seat = seat;
                    }
                }
                self.accepted = answers.into_iter().collect();
                // Sent before the connection dropped and never acknowledged:
                // send again (the first answer stands, so no double count).
                let resend: Vec<_> = self
                    .pending
                    .iter()
                    .filter(|(s, _)| !self.accepted.contains_key(s))
                    .map(|(&step, &choice)| ToServer::Choose { step, choice })
                    .collect();
                self.outbox.splice(0..0, resend);
                self.reported = None;
            }
            ToClient::Class { state } => self.state = Some(state),
            ToClient::Accepted { step, choice } => {
                self.accepted.insert(step, choice);
                self.pending.remove(&step);
            }
            ToClient::Dashboard { board } => {
                self.experiment.board_round(board.experiment.as_ref().map(|e| e.round));
                self.board = board;
            }
            ToClient::Assigned { assignment } => self.experiment.assigned(assignment),
            ToClient::Curve { round, id, value, points, restart } => {
                self.experiment.curve(round, id, value, points, restart)
            }
            ToClient::View { view } => self.view = Some(view),
            ToClient::Csv { text } => {
                let code = self.link.as_ref().map_or("", |l| l.code.as_str());
                files.write(super::export::ExportFile::new(format!("class-{code}-answers"), "csv", text));
            }
            ToClient::Refused { reason } => self.refusal = Some(reason),
            // Refused at the door (a wrong code or link, a full class):
            // trying again will not help. Otherwise the page reconnects.
            ToClient::Shut { reason, retry: false } => self.status = Status::Refused(reason),
            ToClient::Shut { reason, retry: true } => self.refusal = Some(reason),
            ToClient::Ended => self.status = Status::Ended,
        }
    }

    /// What the lesson's narration shows of the class ([`ClassView`]).
    pub fn view_of(&self, player: &LessonPlayer) -> Option<ClassView> {
        self.link.as_ref()?;
        let state = self.state.as_ref();
        let step = player.step;
        let revealed = state.and_then(|s| s.reveals.iter().find(|r| r.step == step));
        let teacher = self.is_teacher();
        Some(ClassView {
            hide_answer: !teacher && revealed.is_none(),
            max_step: state.filter(|s| s.locked && !teacher).map(|s| s.step),
            // The class's counts under the question once revealed, for the
            // teacher too (their screen is the projected one; the live bars
            // are in the class panel).
            counts: revealed.map(|r| r.counts.clone()),
            answer_sent: self.accepted.contains_key(&step),
        })
    }
}

pub use super::answers::ClassView;

pub struct ClassPlugin;

impl Plugin for ClassPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<ClassClient>()
            .init_non_send::<ClassSocket>()
            .add_systems(
                Update,
                (pump, follow, teacher_keys, track_run)
                    .chain()
                    .in_set(super::schedule::AppSystems::Input),
            );
    }
}

/// Connects (again), reads what arrived, sends what is queued.
fn pump(
    mut socket: NonSendMut<ClassSocket>,
    mut class: ResMut<ClassClient>,
    mut files: MessageWriter<super::export::ExportFile>,
) {
    if class.link.is_none() || matches!(class.status, Status::Refused(_) | Status::Ended) {
        socket.pair = None;
        return;
    }
    if socket.pair.is_none() {
        if class.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let options = ewebsock::Options {
            max_incoming_frame_size: 8 << 20,
            ..Default::default()
        };
        let arrived = socket.arrived_ms.clone();
        let stamp = move || arrived.store(now_ms(), std::sync::atomic::Ordering::Relaxed);
        match ewebsock::connect_with_wakeup(class.socket_url.clone(), options, stamp) {
            Ok(pair) => socket.pair = Some(pair),
            Err(e) => {
                class.lost(e);
                return;
            }
        }
    }
    let mut events = Vec::new();
    if let Some((_, rx)) = &socket.pair {
        while let Some(event) = rx.try_recv() {
            events.push(event);
        }
    }
    for event in events {
        match event {
            ewebsock::WsEvent::Opened => {
                if let (Some(hello), Some((tx, _))) = (class.hello(), socket.pair.as_mut()) {
                    tx.send(ewebsock::WsMessage::Text(hello.to_text()));
                }
            }
            ewebsock::WsEvent::Message(ewebsock::WsMessage::Text(text)) => match ToClient::parse(&text) {
                Ok(msg) => {
                    if let ToClient::Class { state } = &msg
                        && class.state.as_ref().is_none_or(|s| s.step != state.step)
                    {
                        let at = socket.arrived_ms.load(std::sync::atomic::Ordering::Relaxed);
                        class.step_arrived = Some((state.step, at));
                    }
                    class.receive(msg, &mut files)
                }
                Err(e) => warn!("{e}"),
            },
            ewebsock::WsEvent::Message(_) => {}
            ewebsock::WsEvent::Error(e) => {
                socket.pair = None;
                class.lost(e);
                return;
            }
            ewebsock::WsEvent::Closed => {
                socket.pair = None;
                class.lost("the teacher's machine closed the connection".into());
                return;
            }
        }
    }
    if class.status == Status::In
        && let Some((tx, _)) = socket.pair.as_mut()
    {
        for msg in std::mem::take(&mut class.outbox) {
            if let ToServer::Goto { step } = msg {
                class.goto_sent = Some((step, now_ms()));
            }
            tx.send(ewebsock::WsMessage::Text(msg.to_text()));
        }
    }
}

/// Keeps the lesson with the class: a student on the teacher's step (and
/// not past it while paced), their answers sent; the teacher's steps sent.
fn follow(
    mut class: ResMut<ClassClient>,
    mut player: ResMut<LessonPlayer>,
    mut workshop: ResMut<super::workshop::Workshop>,
    mut ui_state: ResMut<super::ui::state::UiState>,
    language: Res<super::language::AppLanguage>,
    mut next_scene: ResMut<NextState<Scene>>,
    mut pending: ResMut<PendingFocus>,
    run: Option<Res<super::training::Run>>,
    shown: Res<ShownView>,
    mut triggers: Commands,
) {
    if class.status != Status::In {
        return;
    }
    if class.shown != *shown {
        class.shown = shown.clone();
    }
    let (Some(lesson), Some(state)) = (class.lesson.clone(), class.state.clone()) else {
        return;
    };
    let student = class.is_student();
    if player.lesson.as_ref().is_none_or(|(name, _)| *name != lesson) {
        match crate::lesson::Lesson::load_in(&lesson, language.current) {
            Ok(l) => *player = LessonPlayer::open(lesson.clone(), l, state.step),
            Err(e) => {
                class.status = Status::Refused(e.to_string());
                return;
            }
        }
        class.followed = Some(state.step);
        class.reported = None;
        if student {
            // A class's student page is a workshop link: the lesson alone.
            workshop.locked = true;
            ui_state.wide = true;
        } else {
            class.reported = Some(state.step);
        }
    }
    if student {
        if class.followed != Some(state.step) {
            class.followed = Some(state.step);
            player.jump(state.step);
        }
        if state.locked && player.step > state.step {
            player.jump(state.step);
        }
        if class.reported != Some(player.step) {
            class.reported = Some(player.step);
            let step = player.step;
            class.send(ToServer::At { step });
        }
        let step = player.step;
        let asks = player
            .lesson
            .as_ref()
            .is_some_and(|(_, l)| l.steps.get(step).is_some_and(|s| s.question.is_some()));
        match (player.chosen, class.accepted.get(&step).copied()) {
            // Back on a step answered before (or after a reload): their pick.
            (None, Some(choice)) => player.chosen = Some(choice),
            (Some(choice), None) if asks && !class.pending.contains_key(&step) => {
                class.pending.insert(step, choice);
                class.send(ToServer::Choose { step, choice });
            }
            _ => {}
        }
        // The teacher's view, once the step's own scene and focus are
        // applied (so the step does not undo it).
        if player.step_applied()
            && let Some(view) = class.view.take()
            && let Some(scene) = Scene::from_key(&view.scene)
        {
            next_scene.set(scene);
            if let Some(prompt) = view.prompt {
                triggers.trigger(LessonAction(crate::lesson::Action::Prompt(prompt), scene));
            }
            // The server checked the head and position against the lesson's
            // model; this page checks them against its own.
            let shape = run.as_ref().map(|r| {
                let c = r.config();
                (c.n_layer, c.n_head, c.ctx)
            });
            let preset = player.lesson.as_ref().map_or(String::new(), |(_, l)| l.preset.clone());
            let focus = |focus| LessonFocus { scene, focus, preset: preset.clone() };
            if let (Some((layer, head)), Some((layers, heads, _))) = (view.head, shape)
                && layer < layers
                && head < heads
            {
                pending.add(focus(crate::lesson::Focus::Head { layer, head }));
            }
            if let (Some(p), Some((_, _, ctx))) = (view.position, shape)
                && p < ctx
            {
                pending.add(focus(crate::lesson::Focus::Position(p)));
            }
        }
    } else if class.reported != Some(player.step) {
        class.reported = Some(player.step);
        let step = player.step;
        class.send(ToServer::Goto { step });
    }
}

/// A student's experiment run: notes which run it is, grows its curve
/// ([`experiment::extend_curve`]) and sends it.
fn track_run(
    class: ResMut<ClassClient>,
    mut created: MessageReader<super::training::RunCreated>,
    added: Query<&super::training::StepRecord, Added<super::training::StepRecord>>,
    run: Option<Res<super::training::Run>>,
) {
    let class = class.into_inner();
    for c in created.read() {
        class.experiment.run_created(c.generation);
    }
    let page = &mut class.experiment;
    let (Some(run), Some(generation), Some(a)) = (run, page.generation, page.assignment.as_ref()) else {
        return;
    };
    if run.generation != generation {
        return;
    }
    let sweep = a.sweep.clone();
    let state = run.state;
    let diverged_at = (state == super::training::RunState::Diverged).then(|| run.step() + 1);
    experiment::extend_curve(&mut page.points, &sweep, added.iter().map(|r| (r.step, r.loss)), diverged_at);
    let ended = matches!(state, super::training::RunState::Diverged | super::training::RunState::Finished);
    if class.status == Status::In
        && let Some(points) = class.experiment.due(ended)
    {
        class.send(ToServer::Curve { points });
    }
}

/// The teacher's key: R reveals the answers of the step's question (as
/// the class panel's button does), unless a text field has the keys.
fn teacher_keys(
    keys: Option<Res<ButtonInput<KeyCode>>>,
    mut class: ResMut<ClassClient>,
    player: Res<LessonPlayer>,
    mut contexts: bevy_egui::EguiContexts,
) {
    let Some(keys) = keys else { return };
    if !class.is_teacher() || class.status != Status::In || !keys.just_pressed(KeyCode::KeyR) {
        return;
    }
    if contexts.ctx_mut().is_ok_and(|ctx| ctx.egui_wants_keyboard_input()) {
        return;
    }
    let step = player.step;
    let asks = player
        .lesson
        .as_ref()
        .is_some_and(|(_, l)| l.steps.get(step).is_some_and(|s| s.question.is_some()));
    if asks {
        class.send(ToServer::ShowAnswers { step });
    }
}

/// The class as the page's report and the headless line give it (the
/// browser test reads it): the status, role, the class's step and reveals,
/// a student's answers on record, the teacher's tallies.
pub fn report(class: &ClassClient) -> serde_json::Value {
    if class.link.is_none() {
        return serde_json::Value::Null;
    }
    let status = match &class.status {
        Status::Off => "off".to_string(),
        Status::Connecting => "connecting".into(),
        Status::In => "in".into(),
        Status::Lost(why) => format!("lost: {why}"),
        Status::Refused(why) => format!("refused: {why}"),
        Status::Ended => "ended".into(),
    };
    serde_json::json!({
        "status": status,
        "role": class.role,
        "lesson": class.lesson,
        "state": class.state,
        "accepted": class.accepted.iter().map(|(s, c)| [s, c]).collect::<Vec<_>>(),
        "students": class.board.students.len(),
        "tallies": class.board.tallies,
        "refusal": class.refusal,
        "reveal_button": class.reveal_rect.map(|r| [r.min.x, r.min.y, r.max.x, r.max.y]),
        "goto_sent_ms": class.goto_sent,
        "step_arrived_ms": class.step_arrived,
        "shown": {
            "scene": class.shown.scene.map(|s| s.key()),
            "prompt": class.shown.prompt,
            "head": class.shown.head,
            "position": class.shown.position,
        },
        "experiment": {
            "value": class.experiment.assignment.as_ref().map(|a| a.value),
            "predicted": class.experiment.assignment.as_ref().and_then(|a| a.predicted.clone()),
            "points": class.experiment.points,
            "curves": class.experiment.curves.len(),
        },
    })
}

/// The socket's address from a page's address (`http://host:port/…` →
/// `ws://host:port/class/ws`; https → wss).
pub fn socket_url(page: &str) -> Result<String, String> {
    let page = page.trim();
    let (scheme, rest) = if let Some(rest) = page.strip_prefix("http://") {
        ("ws", rest)
    } else if let Some(rest) = page.strip_prefix("https://") {
        ("wss", rest)
    } else {
        return Err(format!(
            "`{page}` is not a class's address: give the teacher's link as `tinygpt class` printed it (http://…/#class=…)"
        ));
    };
    let host = rest.split(['/', '#', '?']).next().unwrap_or("");
    if host.is_empty() {
        return Err(format!("`{page}` names no machine: give the address `tinygpt class` printed"));
    }
    Ok(format!("{scheme}://{host}{}", crate::class::protocol::SOCKET_PATH))
}

/// `tinygpt app --join URL`: the class a link joins, and its socket.
pub fn from_join_url(url: &str) -> Result<(ClassLink, String), String> {
    let socket = socket_url(url)?;
    if socket.starts_with("wss://") {
        // The native client (ewebsock on tungstenite) is built without TLS.
        return Err(format!(
            "`{url}` is a class served over https (--tls): the native app joins over http only, so open the link in a browser"
        ));
    }
    let fragment = url.split_once('#').map_or("", |(_, f)| f);
    let (link, problems) = super::link::Link::parse(fragment);
    match link.class {
        Some(class) => Ok((class, socket)),
        None => Err(problems.into_iter().next().unwrap_or_else(|| {
            format!("`{url}` has no class code: give the link `tinygpt class` printed (…/#class=CODE)")
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_url_names_the_socket_and_the_class() {
        let (link, socket) = from_join_url("http://192.168.1.20:8080/#class=k7q2xm&teacher=0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(socket, "ws://192.168.1.20:8080/class/ws");
        assert_eq!(link.code, "K7Q2XM");
        assert!(link.teacher.is_some());
        assert!(from_join_url("ftp://x/#class=K7Q2XM").is_err());
        assert!(from_join_url("https://x:1/#class=K7Q2XM").unwrap_err().contains("browser"));
        assert!(from_join_url("http://x:1/").is_err());
        assert!(from_join_url("http://x:1/#class=OOOOOO").is_err());
    }
}
