//! `tinygpt class`'s server: one process on the teacher's laptop serving
//! the web build, a join page and the class's WebSocket (axum on tokio).
//!
//! - `/join` (the address students type): a page asking for the code and a
//!   nickname, which opens the app at `/#class=CODE`.
//! - `/class/ws`: the socket ([`super::protocol`]). A page's first message
//!   says who it is; a student needs the code, the teacher the token
//!   (compared in constant time).
//! - everything else: the web build (`web/dist`), or a page saying how to
//!   build it.
//!
//! Safe by default: it binds 127.0.0.1 unless told otherwise; a message is
//! at most [`MAX_MESSAGE_BYTES`], checked against the protocol and the
//! class, and each page may send [`RATE_PER_SECOND`] a second (a burst of
//! [`RATE_BURST`]); anything else is refused with a logged reason, and a
//! page that keeps at it is disconnected. Each page's outbox is bounded: a
//! page too slow to read is disconnected rather than let the server's
//! memory grow. Answers are acknowledged only once on disk ([`super::log`]).

use super::log::SessionLog;
use super::protocol::{
    self, Assignment, CODE_LEN, MAX_MESSAGE_BYTES, Role, Seat, SharedView, StudentId, ToClient, ToServer,
};
use super::session::{LessonShape, Record, Session};
use axum::Router;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};

/// Messages a page may send each second, on average.
pub const RATE_PER_SECOND: f64 = 20.0;
/// … and at once.
pub const RATE_BURST: f64 = 40.0;
/// Refused messages after which a page is disconnected.
const MAX_REFUSALS: u32 = 50;
/// Messages waiting for a page before it counts as too slow.
const OUTBOX: usize = 1024;
/// How long a page has to say who it is (a page still loading on a busy
/// Chromebook may take a while to run its first frames).
const HELLO_WITHIN: Duration = Duration::from_secs(30);
/// How often the teacher's dashboard is refreshed while answers come in.
const DASHBOARD_EVERY: Duration = Duration::from_millis(100);

/// What `tinygpt class` was asked for.
#[derive(Clone, Debug)]
pub struct ClassOptions {
    pub bind: IpAddr,
    /// 0: any free port.
    pub port: u16,
    /// The class's file (resumed if it is one).
    pub session: PathBuf,
    /// A built-in lesson (a new class's; a resumed one keeps its own).
    pub lesson: Option<String>,
    /// The web build to serve.
    pub web: PathBuf,
    /// Serve https and wss with this certificate (PEM) and its key.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// A class being served.
#[derive(Clone, Debug)]
pub struct Class {
    pub addr: SocketAddr,
    pub code: String,
    pub token: String,
    pub lesson: LessonShape,
    /// Resumed from its file: (students, answers, the teacher's step).
    pub resumed: Option<(usize, usize, usize)>,
    /// The web build is there.
    pub web_found: bool,
    pub session: PathBuf,
    /// Served over https (`--tls`).
    pub https: bool,
}

impl Class {
    /// The scheme of the class's pages: `https` with `--tls`, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }
}

type ConnId = u64;

/// What goes out to one page.
#[derive(Debug)]
enum Out {
    Text(Utf8Bytes),
    Close(String),
}

/// What the log's thread does.
enum LogJob {
    /// Write, sync, then send the acknowledgements.
    Write {
        records: Vec<Record>,
        acks: Vec<(mpsc::Sender<Out>, Utf8Bytes)>,
    },
    /// The class ended: delete the file.
    Remove,
}

struct Client {
    tx: mpsc::Sender<Out>,
    role: Option<Role>,
    student: Option<StudentId>,
    refusals: u32,
}

/// The class and its pages, behind one lock (no await while it is held).
struct Hub {
    session: Session,
    clients: HashMap<ConnId, Client>,
    next_conn: ConnId,
    log: std::sync::mpsc::Sender<LogJob>,
    dashboard_dirty: bool,
    ended: bool,
    /// The teacher's last "send my view" and the step it was sent at: a
    /// student who joins (or rejoins) on that step gets it too.
    shared_view: Option<(usize, SharedView)>,
}

struct Shared {
    hub: Mutex<Hub>,
    ended: Notify,
    web: Option<PathBuf>,
}

/// One line on the server's console about a page.
fn note(conn: ConnId, what: &str) {
    eprintln!("class: page {conn}: {what}");
}

fn text(msg: &ToClient) -> Utf8Bytes {
    Utf8Bytes::from(msg.to_text())
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    bytes
}

/// What handling a message leaves the connection to do.
enum Flow {
    Go,
    /// Close the connection: why, and whether the page may try again.
    Close(String, bool),
}

impl Hub {
    fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Hub> {
        // A panic while holding the lock would be a bug; the class goes on.
        shared.hub.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&mut self, conn: ConnId, msg: Utf8Bytes) {
        let slow = match self.clients.get(&conn) {
            Some(c) => c.tx.try_send(Out::Text(msg)).is_err(),
            None => false,
        };
        if slow {
            note(conn, "too slow to read its messages: disconnected");
            self.drop_client(conn);
        }
    }

    fn drop_client(&mut self, conn: ConnId) {
        if let Some(c) = self.clients.remove(&conn) {
            let _ = c.tx.try_send(Out::Close("too slow".into()));
            if let Some(id) = c.student {
                self.session.set_online(id, self.still_online(id));
                self.dashboard_dirty = true;
            }
        }
    }

    fn still_online(&self, id: StudentId) -> bool {
        self.clients.values().any(|c| c.student == Some(id))
    }

    fn broadcast(&mut self, msg: &ToClient, to: impl Fn(&Client) -> bool) {
        let t = text(msg);
        let targets: Vec<ConnId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.role.is_some() && to(c))
            .map(|(k, _)| *k)
            .collect();
        for conn in targets {
            self.send(conn, t.clone());
        }
    }

    fn broadcast_class(&mut self) {
        let msg = ToClient::Class {
            state: self.session.state(),
        };
        self.broadcast(&msg, |_| true);
    }

    fn refuse(&mut self, conn: ConnId, reason: String) -> Flow {
        note(conn, &format!("refused: {reason}"));
        let Some(c) = self.clients.get_mut(&conn) else {
            return Flow::Close(reason, false);
        };
        c.refusals += 1;
        if c.refusals > MAX_REFUSALS {
            return Flow::Close(format!("{MAX_REFUSALS} messages refused"), true);
        }
        self.send(conn, text(&ToClient::Refused { reason }));
        Flow::Go
    }

    /// Applies records now and has the log's thread write them, then send
    /// the acknowledgements.
    fn record(&mut self, records: Vec<Record>, acks: Vec<(ConnId, ToClient)>) {
        for r in &records {
            self.session.apply(r);
        }
        let acks = acks
            .into_iter()
            .filter_map(|(conn, msg)| self.clients.get(&conn).map(|c| (c.tx.clone(), text(&msg))))
            .collect();
        if self.log.send(LogJob::Write { records, acks }).is_err() {
            eprintln!("class: the class file's writer has stopped; answers are not being saved");
        }
        self.dashboard_dirty = true;
    }

    fn handle(&mut self, conn: ConnId, text_in: &str) -> Flow {
        let msg = match ToServer::parse(text_in) {
            Ok(m) => m,
            Err(e) => return self.refuse(conn, e),
        };
        if self.ended {
            return Flow::Close("the class has ended".into(), false);
        }
        let (role, student) = match self.clients.get(&conn) {
            Some(c) => (c.role, c.student),
            None => return Flow::Close("unknown page".into(), true),
        };
        match (role, msg) {
            (None, ToServer::Teach { token }) => {
                if !self.session.is_teacher(&token) {
                    note(conn, "refused: a wrong teacher token");
                    return Flow::Close("that is not this class's teacher link".into(), false);
                }
                self.clients.get_mut(&conn).expect("checked").role = Some(Role::Teacher);
                note(conn, "the teacher");
                let welcome = ToClient::Welcome {
                    role: Role::Teacher,
                    lesson: self.session.lesson.name.clone(),
                    code: self.session.code.clone(),
                    seat: None,
                    answers: Vec::new(),
                };
                self.send(conn, text(&welcome));
                let state = ToClient::Class { state: self.session.state() };
                self.send(conn, text(&state));
                let board = ToClient::Dashboard { board: self.session.dashboard() };
                self.send(conn, text(&board));
                for curve in self.curves() {
                    self.send(conn, text(&curve));
                }
                Flow::Go
            }
            (None, ToServer::Join { code, nickname, seat }) => {
                let code_ok = protocol::normalize_code(&code)
                    .is_ok_and(|c| super::session::same_secret(&c, &self.session.code));
                if !code_ok {
                    note(conn, "refused: a wrong class code");
                    return Flow::Close("no class has that code: check the teacher's screen".into(), false);
                }
                self.join(conn, nickname, seat)
            }
            (None, _) => Flow::Close("the first message must be `join` or `teach`".into(), false),
            (Some(_), ToServer::Join { .. } | ToServer::Teach { .. }) => {
                self.refuse(conn, "this page is in the class already".into())
            }
            (Some(Role::Student), m) if m.is_teachers() => {
                self.refuse(conn, "only the teacher can do that".into())
            }
            (Some(Role::Student), ToServer::At { step }) => {
                let id = student.expect("a student has an id");
                match self.session.student_at(id, step) {
                    Ok(()) => {
                        self.dashboard_dirty = true;
                        Flow::Go
                    }
                    Err(e) => self.refuse(conn, e),
                }
            }
            (Some(Role::Student), ToServer::Choose { step, choice }) => {
                let id = student.expect("a student has an id");
                match self.session.answer(id, step, choice) {
                    Ok(r) => {
                        self.record(vec![r], vec![(conn, ToClient::Accepted { step, choice })]);
                        Flow::Go
                    }
                    Err(e) => self.refuse(conn, e),
                }
            }
            (Some(Role::Student), ToServer::Predict { diverges }) => {
                let id = student.expect("a student has an id");
                match self.session.checked(Record::Predicted { id, diverges: diverges.clone() }) {
                    Ok(r) => {
                        let assignment = self.session.assignment(id).map(|a| Assignment {
                            predicted: Some(diverges),
                            ..a
                        });
                        self.record(vec![r], vec![(conn, ToClient::Assigned { assignment })]);
                        Flow::Go
                    }
                    Err(e) => self.refuse(conn, e),
                }
            }
            (Some(Role::Student), ToServer::Curve { points }) => {
                let id = student.expect("a student has an id");
                let Some(e) = self.session.experiment.as_ref() else {
                    return self.refuse(conn, "the class has no experiment now".into());
                };
                let (value, round) = (e.sweep.value_of(id), e.round);
                let restart = super::experiment::starts_again(e.curves.get(&id).map_or(&[][..], Vec::as_slice), &points);
                match self.session.checked(Record::Reported { id, points: points.clone() }) {
                    Ok(r) => {
                        self.record(vec![r], Vec::new());
                        let curve = ToClient::Curve { round, id, value, points, restart };
                        self.broadcast(&curve, |c| c.role == Some(Role::Teacher));
                        Flow::Go
                    }
                    Err(e) => self.refuse(conn, e),
                }
            }
            (Some(Role::Student), _) => self.refuse(conn, "not a student's message".into()),
            (Some(Role::Teacher), m) => self.teacher(conn, m),
        }
    }

    fn join(&mut self, conn: ConnId, nickname: Option<String>, seat: Option<Seat>) -> Flow {
        // A seat the class does not know (a stale link, a made-up key)
        // joins as a new student: it never takes over another's seat.
        let known = seat.and_then(|s| self.session.rejoin(&s).ok().map(|id| (s, id)));
        let id = match known {
            Some((seat, id)) => {
                let welcome = ToClient::Welcome {
                    role: Role::Student,
                    lesson: self.session.lesson.name.clone(),
                    code: self.session.code.clone(),
                    answers: self.session.answers_of(id),
                    seat: Some(seat),
                };
                self.send(conn, text(&welcome));
                id
            }
            None => {
                let nickname = match protocol::check_nickname(nickname.as_deref()) {
                    Ok(n) => n,
                    Err(e) => return Flow::Close(e, false),
                };
                let key = protocol::hex(&random::<16>());
                let r = match self.session.join(key.clone(), nickname) {
                    Ok(r) => r,
                    Err(e) => return Flow::Close(e, false),
                };
                let Record::Joined { id, .. } = r else { unreachable!("join makes a Joined") };
                let welcome = ToClient::Welcome {
                    role: Role::Student,
                    lesson: self.session.lesson.name.clone(),
                    code: self.session.code.clone(),
                    seat: Some(Seat { id, key }),
                    answers: Vec::new(),
                };
                // Welcomed once on disk (a seat handed out is never lost),
                // then told where the class is.
                let state = ToClient::Class { state: self.session.state() };
                let mut replies = vec![(conn, welcome), (conn, state)];
                replies.extend(self.view_for_joiner().map(|v| (conn, v)));
                if self.session.experiment.is_some() {
                    replies.push((conn, ToClient::Assigned { assignment: self.session.assignment(id) }));
                }
                self.record(vec![r], replies);
                self.admit(conn, id);
                return Flow::Go;
            }
        };
        self.admit(conn, id);
        let state = ToClient::Class { state: self.session.state() };
        self.send(conn, text(&state));
        if let Some(view) = self.view_for_joiner() {
            self.send(conn, text(&view));
        }
        if self.session.experiment.is_some() {
            let assigned = ToClient::Assigned { assignment: self.session.assignment(id) };
            self.send(conn, text(&assigned));
        }
        Flow::Go
    }

    /// Every curve of the experiment, for a teacher's page that (re)joins.
    fn curves(&self) -> Vec<ToClient> {
        let Some(e) = &self.session.experiment else { return Vec::new() };
        e.curves
            .iter()
            .map(|(id, points)| ToClient::Curve {
                round: e.round,
                id: *id,
                value: e.sweep.value_of(*id),
                points: points.clone(),
                restart: true,
            })
            .collect()
    }

    /// Each student online gets their part in the experiment (or hears it
    /// ended).
    fn send_assignments(&mut self) {
        let students: Vec<(ConnId, StudentId)> =
            self.clients.iter().filter_map(|(conn, c)| Some((*conn, c.student?))).collect();
        for (conn, id) in students {
            let assigned = ToClient::Assigned { assignment: self.session.assignment(id) };
            self.send(conn, text(&assigned));
        }
    }

    /// The teacher's shared view, where it was sent at the class's step.
    fn view_for_joiner(&self) -> Option<ToClient> {
        let (step, view) = self.shared_view.as_ref()?;
        (*step == self.session.step).then(|| ToClient::View { view: view.clone() })
    }

    fn admit(&mut self, conn: ConnId, id: StudentId) {
        let c = self.clients.get_mut(&conn).expect("connected");
        c.role = Some(Role::Student);
        c.student = Some(id);
        self.session.set_online(id, true);
        self.dashboard_dirty = true;
    }

    fn teacher(&mut self, conn: ConnId, msg: ToServer) -> Flow {
        let record = match msg {
            ToServer::Goto { step } => self.session.goto(step),
            ToServer::Pace { locked } => Ok(Record::Paced { locked }),
            ToServer::Pause { paused } => Ok(Record::Paused { paused }),
            ToServer::ShowAnswers { step } => self.session.reveal(step),
            ToServer::View { view } => {
                return match self.session.check_view(&view) {
                    Ok(()) => {
                        self.shared_view = Some((self.session.step, view.clone()));
                        self.broadcast(&ToClient::View { view }, |c| c.role == Some(Role::Student));
                        Flow::Go
                    }
                    Err(e) => self.refuse(conn, e),
                };
            }
            ToServer::Experiment { sweep } => {
                return match self.session.checked(Record::Experimented { sweep }) {
                    Ok(r) => {
                        self.record(vec![r], Vec::new());
                        self.send_assignments();
                        Flow::Go
                    }
                    Err(e) => self.refuse(conn, e),
                };
            }
            ToServer::Csv => {
                let csv = ToClient::Csv { text: self.session.csv() };
                self.send(conn, text(&csv));
                return Flow::Go;
            }
            ToServer::End => {
                note(conn, "the teacher ended the class");
                self.ended = true;
                self.broadcast(&ToClient::Ended, |_| true);
                let _ = self.log.send(LogJob::Remove);
                return Flow::Go;
            }
            _ => return self.refuse(conn, "not a teacher's message".into()),
        };
        match record {
            Ok(r) => {
                let moved = matches!(r, Record::Moved { .. });
                self.record(vec![r], Vec::new());
                if moved {
                    self.session.follow_teacher();
                }
                self.broadcast_class();
                Flow::Go
            }
            Err(e) => self.refuse(conn, e),
        }
    }
}

/// A page's messages, limited per second.
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new() -> Self {
        Self {
            tokens: RATE_BURST,
            last: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * RATE_PER_SECOND)
            .min(RATE_BURST);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The port, listened on with or without TLS.
enum Bound {
    Plain(tokio::net::TcpListener),
    Tls(super::tls::TlsListener),
}

/// Opens (or resumes) the class and binds its port; the future serves it
/// until the teacher ends the class.
pub async fn start(
    options: ClassOptions,
) -> Result<(Class, impl Future<Output = std::io::Result<()>> + Send + 'static), String> {
    let path = options.session.clone();
    // A certificate that cannot be used stops the class before its file
    // is made.
    let tls = match &options.tls {
        Some((cert, key)) => Some(super::tls::server_config(cert, key)?),
        None => None,
    };
    // Another tinygpt serving the same file is refused (a lock beside it).
    let claim = crate::output::claim(&path, "--session", &[], true)?;
    let exists = std::fs::symlink_metadata(&path).is_ok();
    let (session, log, resumed) = if exists {
        let (log, records) = SessionLog::resume(&path)?;
        let session = Session::replay(&records)
            .map_err(|e| format!("{} cannot be resumed: {e}; start a new class with another --session", path.display()))?;
        if let Some(lesson) = &options.lesson
            && *lesson != session.lesson.name
        {
            return Err(format!(
                "{} is a class of the lesson `{}`; to teach `{lesson}`, pass --session with a new file name",
                path.display(),
                session.lesson.name
            ));
        }
        let answers = session.answers.values().map(|a| a.len()).sum();
        let resumed = (session.students.len(), answers, session.step);
        (session, log, Some(resumed))
    } else {
        let lesson = LessonShape::builtin(options.lesson.as_deref().unwrap_or("next-byte"))?;
        let code = protocol::code_from(random::<CODE_LEN>());
        let token = protocol::hex(&random::<16>());
        let (session, opened) = Session::open(lesson, code, token);
        let log = SessionLog::create(&path, &opened)?;
        (session, log, None)
    };
    let listener = tokio::net::TcpListener::bind((options.bind, options.port))
        .await
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                format!(
                    "port {} is taken (another class or server): pass --port with another number",
                    options.port
                )
            } else {
                format!("cannot listen on {}:{}: {e}", options.bind, options.port)
            }
        })?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let listener = match &tls {
        Some(config) => Bound::Tls(
            super::tls::TlsListener::new(listener, config.clone())
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?,
        ),
        None => Bound::Plain(listener),
    };
    let web_found = options.web.join("index.html").is_file();
    let class = Class {
        addr,
        code: session.code.clone(),
        token: session.token().to_string(),
        lesson: session.lesson.clone(),
        resumed,
        web_found,
        session: path.clone(),
        https: tls.is_some(),
    };
    let (log_tx, log_rx) = std::sync::mpsc::channel();
    let writer = std::thread::Builder::new()
        .name("class-log".into())
        .spawn(move || write_log(log, log_rx))
        .map_err(|e| format!("cannot start the class file's writer: {e}"))?;
    let shared = Arc::new(Shared {
        hub: Mutex::new(Hub {
            session,
            clients: HashMap::new(),
            next_conn: 1,
            log: log_tx,
            dashboard_dirty: false,
            ended: false,
            shared_view: None,
        }),
        ended: Notify::new(),
        web: web_found.then(|| options.web.clone()),
    });
    let router = router(shared.clone());
    let serve = async move {
        let dashboard = tokio::spawn(refresh_dashboards(shared.clone()));
        let ended = {
            let shared = shared.clone();
            async move { shared.ended.notified().await }
        };
        let result = match listener {
            Bound::Plain(listener) => axum::serve(listener, router).with_graceful_shutdown(ended).await,
            Bound::Tls(listener) => axum::serve(listener, router).with_graceful_shutdown(ended).await,
        };
        dashboard.abort();
        // Closing the log's channel ends its thread once it has written all.
        drop(shared);
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        drop(claim);
        result
    };
    Ok((class, serve))
}

fn router(shared: Arc<Shared>) -> Router {
    let router = Router::new()
        .route(protocol::SOCKET_PATH, get(socket))
        .route("/join", get(join_page))
        .route("/class/check", get(check_code));
    let router = match &shared.web {
        Some(dir) => router.fallback_service(tower_http::services::ServeDir::new(dir)),
        None => router.fallback(missing_web),
    };
    router.with_state(shared).layer(isolation("cross-origin-opener-policy", "same-origin")).layer(isolation(
        "cross-origin-embedder-policy",
        "require-corp",
    ))
}

/// One of the two headers that make the page cross-origin isolated, so a
/// student's page without WebGPU trains in the threaded trainer worker
/// (web/trainer-worker.js; browsers isolate only secure pages: `--tls`,
/// or the teacher's own localhost).
fn isolation(
    name: &'static str,
    value: &'static str,
) -> tower_http::set_header::SetResponseHeaderLayer<axum::http::HeaderValue> {
    tower_http::set_header::SetResponseHeaderLayer::overriding(
        axum::http::HeaderName::from_static(name),
        axum::http::HeaderValue::from_static(value),
    )
}

/// The log's thread: writes each batch of records, syncs, acknowledges.
fn write_log(mut log: SessionLog, jobs: std::sync::mpsc::Receiver<LogJob>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        batch.extend(jobs.try_iter());
        let mut records = Vec::new();
        let mut acks = Vec::new();
        let mut remove = false;
        for job in batch {
            match job {
                LogJob::Write { records: r, acks: a } => {
                    records.extend(r);
                    acks.extend(a);
                }
                LogJob::Remove => remove = true,
            }
        }
        if remove {
            let path = log.path().display().to_string();
            match log.remove() {
                Ok(()) => eprintln!("class: ended; {path} deleted"),
                Err(e) => eprintln!("class: ended; {path} not deleted: {e}"),
            }
            return;
        }
        match log.append(&records) {
            Ok(()) => {
                for (tx, msg) in acks {
                    let _ = tx.try_send(Out::Text(msg));
                }
            }
            Err(e) => eprintln!(
                "class: cannot save to {} ({e}); {} answers and changes are not saved or acknowledged",
                log.path().display(),
                records.len()
            ),
        }
    }
}

/// Sends the teachers a fresh dashboard when something changed.
async fn refresh_dashboards(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(DASHBOARD_EVERY);
    loop {
        tick.tick().await;
        let mut hub = Hub::lock(&shared);
        if hub.dashboard_dirty {
            hub.dashboard_dirty = false;
            let board = ToClient::Dashboard { board: hub.session.dashboard() };
            hub.broadcast(&board, |c| c.role == Some(Role::Teacher));
        }
    }
}

async fn socket(ws: WebSocketUpgrade, State(shared): State<Arc<Shared>>) -> Response {
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| connection(socket, shared))
}

/// One page's connection: its messages in, its outbox out.
async fn connection(mut socket: WebSocket, shared: Arc<Shared>) {
    let (tx, mut rx) = mpsc::channel(OUTBOX);
    let conn = {
        let mut hub = Hub::lock(&shared);
        let conn = hub.next_conn;
        hub.next_conn += 1;
        hub.clients.insert(
            conn,
            Client {
                tx,
                role: None,
                student: None,
                refusals: 0,
            },
        );
        conn
    };
    let mut bucket = Bucket::new();
    let mut warned = Instant::now() - Duration::from_secs(10);
    let hello_by = tokio::time::Instant::now() + HELLO_WITHIN;
    let close = loop {
        let known = Hub::lock(&shared).clients.get(&conn).is_some_and(|c| c.role.is_some());
        tokio::select! {
            incoming = socket.recv() => match incoming {
                None | Some(Ok(Message::Close(_))) => break None,
                Some(Err(e)) => {
                    note(conn, &format!("its connection failed or sent more than {MAX_MESSAGE_BYTES} bytes ({e})"));
                    break None;
                }
                Some(Ok(Message::Text(t))) => {
                    let flow = if bucket.take() {
                        Hub::lock(&shared).handle(conn, t.as_str())
                    } else if warned.elapsed() >= Duration::from_secs(1) {
                        warned = Instant::now();
                        Hub::lock(&shared).refuse(conn, format!("too many messages: at most {RATE_PER_SECOND} a second"))
                    } else {
                        // Counted, not answered: a flood gets one reply a second.
                        let mut hub = Hub::lock(&shared);
                        match hub.clients.get_mut(&conn) {
                            Some(c) => {
                                c.refusals += 1;
                                if c.refusals > MAX_REFUSALS { Flow::Close("flooding".into(), true) } else { Flow::Go }
                            }
                            None => Flow::Close("gone".into(), true),
                        }
                    };
                    if let Flow::Close(reason, retry) = flow {
                        break Some((reason, retry));
                    }
                    if Hub::lock(&shared).ended {
                        shared.ended.notify_one();
                    }
                }
                Some(Ok(Message::Binary(_))) => {
                    if let Flow::Close(reason, retry) = Hub::lock(&shared).refuse(conn, "binary messages are not part of the class protocol".into()) {
                        break Some((reason, retry));
                    }
                }
                Some(Ok(_)) => {}
            },
            out = rx.recv() => match out {
                Some(Out::Text(t)) => {
                    if socket.send(Message::Text(t)).await.is_err() {
                        break None;
                    }
                }
                Some(Out::Close(reason)) => break Some((reason, true)),
                None => break None,
            },
            _ = tokio::time::sleep_until(hello_by), if !known => {
                break Some((format!("no `join` or `teach` within {} seconds", HELLO_WITHIN.as_secs()), true));
            }
        }
    };
    if let Some((reason, retry)) = close {
        note(conn, &format!("closed: {reason}"));
        // The reason goes to the page too, for it to show.
        let _ = socket
            .send(Message::Text(text(&ToClient::Shut { reason, retry })))
            .await;
        let _ = socket.send(Message::Close(None)).await;
    }
    let ended = {
        let mut hub = Hub::lock(&shared);
        if let Some(c) = hub.clients.remove(&conn)
            && let Some(id) = c.student
        {
            let online = hub.still_online(id);
            hub.session.set_online(id, online);
            hub.dashboard_dirty = true;
        }
        hub.ended
    };
    if ended {
        shared.ended.notify_one();
    }
}

#[derive(serde::Deserialize)]
struct CodeQuery {
    code: Option<String>,
}

/// Whether a code is this class's (the join page asks before it opens the app).
async fn check_code(State(shared): State<Arc<Shared>>, Query(q): Query<CodeQuery>) -> Response {
    let hub = Hub::lock(&shared);
    let verdict = match protocol::normalize_code(q.code.as_deref().unwrap_or("")) {
        Ok(code) if super::session::same_secret(&code, &hub.session.code) && !hub.ended => {
            serde_json::json!({ "ok": true, "code": code })
        }
        Ok(_) => serde_json::json!({ "ok": false, "reason": "No class has that code: check the teacher's screen." }),
        Err(e) => serde_json::json!({ "ok": false, "reason": e }),
    };
    ([("content-type", "application/json")], verdict.to_string()).into_response()
}

async fn join_page(State(shared): State<Arc<Shared>>) -> Html<String> {
    let title = Hub::lock(&shared).session.lesson.title.clone();
    Html(JOIN_PAGE.replace("__LESSON__", &html_escape(&title)))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// What every other address answers when the web build is not there.
async fn missing_web() -> Response {
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        Html(MISSING_WEB.to_string()),
    )
        .into_response()
}

const JOIN_PAGE: &str = include_str!("join.html");

const MISSING_WEB: &str = "<!doctype html><meta charset=utf-8><title>TinyGPT class</title>\
<body style=\"font:20px system-ui;margin:2em;max-width:40em\"><h1>The app is not built on the teacher's machine</h1>\
<p>The teacher's machine serves the class, but has no web build to give your browser. \
On that machine, run <code>bash web/build.sh</code>, then reload this page.</p>";
