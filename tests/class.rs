//! The live class's server (issue 57) with simulated pages: pacing,
//! answers and the reveal, rejoining, the teacher's token, malformed,
//! oversized and flooding messages, and a server killed with SIGKILL that
//! resumes with every acknowledged answer.

use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tinygpt::class::protocol::{MAX_MESSAGE_BYTES, Role, Seat, SharedView, ToClient, ToServer};
use tinygpt::class::server::{Class, ClassOptions, start};
use tinygpt::class::session::LessonShape;
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One simulated page.
struct Page {
    ws: Socket,
}

impl Page {
    async fn open(addr: SocketAddr) -> Page {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/class/ws"))
            .await
            .expect("the class's socket accepts a page");
        Page { ws }
    }

    async fn send(&mut self, msg: &ToServer) {
        self.send_text(msg.to_text()).await;
    }

    async fn send_text(&mut self, text: String) {
        self.ws.send(Message::text(text)).await.expect("sent");
    }

    /// The next message, or None once the server closed the socket.
    async fn next(&mut self) -> Option<ToClient> {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.ws.next()).await {
                Err(_) => panic!("no message from the server within 10 s"),
                Ok(None) | Ok(Some(Err(_))) => return None,
                Ok(Some(Ok(Message::Text(t)))) => {
                    return Some(ToClient::parse(t.as_str()).expect("the server speaks the protocol"));
                }
                Ok(Some(Ok(Message::Close(_)))) => return None,
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// Skips messages until one matches.
    async fn until(&mut self, what: &str, want: impl Fn(&ToClient) -> bool) -> ToClient {
        loop {
            match self.next().await {
                Some(m) if want(&m) => return m,
                Some(_) => continue,
                None => panic!("the server closed the page before {what}"),
            }
        }
    }

    /// Reads until the server closes; the last refusal's reason.
    async fn closed(&mut self) -> Option<String> {
        let mut reason = None;
        while let Some(m) = self.next().await {
            if let ToClient::Refused { reason: r } | ToClient::Shut { reason: r, .. } = m {
                reason = Some(r);
            }
        }
        reason
    }

    async fn student(addr: SocketAddr, code: &str, nickname: Option<&str>) -> (Page, Seat) {
        let mut page = Page::open(addr).await;
        page.send(&ToServer::Join {
            code: code.to_lowercase(),
            nickname: nickname.map(String::from),
            seat: None,
        })
        .await;
        let ToClient::Welcome { role, seat, .. } = page
            .until("the welcome", |m| matches!(m, ToClient::Welcome { .. }))
            .await
        else {
            unreachable!()
        };
        assert_eq!(role, Role::Student);
        (page, seat.expect("a student gets a seat"))
    }

    async fn teacher(addr: SocketAddr, token: &str) -> Page {
        let mut page = Page::open(addr).await;
        page.send(&ToServer::Teach { token: token.into() }).await;
        page.until("the welcome", |m| matches!(m, ToClient::Welcome { role: Role::Teacher, .. }))
            .await;
        page
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tinygpt-class-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn serve(dir: &Path, lesson: &str) -> (Class, tokio::task::JoinHandle<std::io::Result<()>>) {
    let (class, serving) = start(ClassOptions {
        bind: "127.0.0.1".parse().unwrap(),
        port: 0,
        session: dir.join("class.jsonl"),
        lesson: Some(lesson.into()),
        web: dir.join("no-web-build"),
        tls: None,
    })
    .await
    .expect("the class starts");
    (class, tokio::spawn(serving))
}

/// Every page the class serves is cross-origin isolated (COOP and COEP),
/// so a student's page without WebGPU trains in the threaded trainer worker
/// (web/trainer-worker.js): the web build's files and the join page alike.
#[tokio::test]
async fn the_class_serves_its_pages_cross_origin_isolated() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = temp_dir("isolated");
    let web = dir.join("web");
    std::fs::create_dir_all(&web).unwrap();
    std::fs::write(web.join("index.html"), "<!doctype html><title>page</title>").unwrap();
    let (class, serving) = start(ClassOptions {
        bind: "127.0.0.1".parse().unwrap(),
        port: 0,
        session: dir.join("class.jsonl"),
        lesson: Some("attention".into()),
        web: web.clone(),
        tls: None,
    })
    .await
    .expect("the class starts");
    let serving = tokio::spawn(serving);
    for path in ["/index.html", "/join"] {
        let mut http = tokio::net::TcpStream::connect(class.addr).await.unwrap();
        http.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), http.read_to_end(&mut reply))
            .await
            .expect("a reply within 10 s")
            .unwrap();
        let reply = String::from_utf8_lossy(&reply).to_lowercase();
        assert!(reply.starts_with("http/1.1 200"), "{path}: {reply}");
        assert!(reply.contains("cross-origin-opener-policy: same-origin"), "{path}: {reply}");
        assert!(reply.contains("cross-origin-embedder-policy: require-corp"), "{path}: {reply}");
    }
    serving.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first step of the lesson with a question, and its choices.
fn question_step(lesson: &LessonShape) -> (usize, usize) {
    lesson
        .steps
        .iter()
        .enumerate()
        .find_map(|(k, (_, q))| q.as_ref().map(|q| (k, q.choices.len())))
        .expect("the lesson asks something")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn students_follow_the_teacher_and_answers_are_revealed_with_their_counts() {
    let dir = temp_dir("pace");
    let (class, _server) = serve(&dir, "attention").await;
    let (q, choices) = question_step(&class.lesson);
    assert!(choices >= 2 && q > 0, "the lesson's first question is past its first step");
    let mut teacher = Page::teacher(class.addr, &class.token).await;
    let mut students = Vec::new();
    for name in [Some("Ana"), None, Some("Li")] {
        students.push(Page::student(class.addr, &class.code, name).await);
    }
    // Paced: a student cannot go past the teacher (at step 0).
    let (page, _) = &mut students[0];
    page.send(&ToServer::At { step: q + 1 }).await;
    page.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    page.send(&ToServer::Choose { step: q, choice: 0 }).await;
    page.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    // The teacher goes to the question: every student follows.
    teacher.send(&ToServer::Goto { step: q }).await;
    for (page, _) in &mut students {
        page.until("the step", |m| matches!(m, ToClient::Class { state } if state.step == q))
            .await;
    }
    // A student's attempt at a teacher's command is refused.
    let (page, _) = &mut students[1];
    page.send(&ToServer::ShowAnswers { step: q }).await;
    let ToClient::Refused { reason } = page.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await else {
        unreachable!()
    };
    assert!(reason.contains("teacher"), "{reason}");
    // Three answers: each acknowledged, none revealed yet.
    let picks = [0, 1, 1];
    for ((page, _), &choice) in students.iter_mut().zip(&picks) {
        let choice = choice % choices;
        page.send(&ToServer::Choose { step: q, choice }).await;
        let m = page
            .until("the acknowledgement", |m| matches!(m, ToClient::Accepted { .. } | ToClient::Refused { .. }))
            .await;
        assert_eq!(m, ToClient::Accepted { step: q, choice });
    }
    // A second answer does not count.
    students[2].0.send(&ToServer::Choose { step: q, choice: 0 }).await;
    students[2].0.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    // The teacher's bars fill with exactly what was sent.
    let mut want = vec![0u32; choices];
    for &c in &picks {
        want[c % choices] += 1;
    }
    teacher
        .until("the tally", |m| {
            matches!(m, ToClient::Dashboard { board } if board.tally(q).is_some_and(|t| t.counts == want) && board.students.len() == 3)
        })
        .await;
    // Revealed: every student sees the answer and the counts.
    teacher.send(&ToServer::ShowAnswers { step: q }).await;
    for (page, _) in &mut students {
        page.until("the reveal", |m| {
            matches!(m, ToClient::Class { state } if state.reveals.iter().any(|r| r.step == q && r.counts == want))
        })
        .await;
    }
    // Too late to answer now.
    let (mut late, _) = Page::student(class.addr, &class.code, None).await;
    late.send(&ToServer::Choose { step: q, choice: 0 }).await;
    late.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    // The CSV has every answer, anonymous.
    teacher.send(&ToServer::Csv).await;
    let ToClient::Csv { text } = teacher.until("the CSV", |m| matches!(m, ToClient::Csv { .. })).await else {
        unreachable!()
    };
    assert_eq!(text.lines().count(), 1 + picks.len(), "{text}");
    assert!(!text.contains("Ana"), "the CSV is anonymous");
    // Pause and unlock reach the students.
    teacher.send(&ToServer::Pause { paused: true }).await;
    students[0].0.until("the pause", |m| matches!(m, ToClient::Class { state } if state.paused)).await;
    // Ending the class deletes its file and tells everyone.
    teacher.send(&ToServer::End).await;
    students[1].0.until("the end", |m| matches!(m, ToClient::Ended)).await;
    for _ in 0..50 {
        if !dir.join("class.jsonl").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!dir.join("class.jsonl").exists(), "the class's file is deleted with it");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_student_rejoins_in_their_seat_and_strangers_are_refused() {
    let dir = temp_dir("rejoin");
    let (class, _server) = serve(&dir, "attention").await;
    let (q, _) = question_step(&class.lesson);
    let mut teacher = Page::teacher(class.addr, &class.token).await;
    teacher.send(&ToServer::Goto { step: q }).await;
    let (mut page, seat) = Page::student(class.addr, &class.code, Some("Ana")).await;
    page.send(&ToServer::Choose { step: q, choice: 1 }).await;
    page.until("the acknowledgement", |m| matches!(m, ToClient::Accepted { .. })).await;
    drop(page);
    // The page reloads: back in its seat, with its answer on record.
    let mut page = Page::open(class.addr).await;
    page.send(&ToServer::Join { code: class.code.clone(), nickname: None, seat: Some(seat.clone()) })
        .await;
    let ToClient::Welcome { seat: again, answers, .. } = page
        .until("the welcome", |m| matches!(m, ToClient::Welcome { .. }))
        .await
    else {
        unreachable!()
    };
    assert_eq!(again, Some(seat.clone()));
    assert_eq!(answers, vec![(q, 1)]);
    // A made-up seat joins as a new student: it never takes Ana's.
    let mut stranger = Page::open(class.addr).await;
    stranger
        .send(&ToServer::Join { code: class.code.clone(), nickname: None, seat: Some(Seat { id: seat.id, key: "0".repeat(32) }) })
        .await;
    let ToClient::Welcome { seat: given, answers, .. } = stranger
        .until("the welcome", |m| matches!(m, ToClient::Welcome { .. }))
        .await
    else {
        unreachable!()
    };
    assert!(given.as_ref().is_some_and(|g| g.id != seat.id && g.key != seat.key), "{given:?}");
    assert!(answers.is_empty());
    drop(stranger);
    // A wrong code, a wrong token: refused and closed, for good.
    let mut stranger = Page::open(class.addr).await;
    stranger.send(&ToServer::Join { code: "ZZZZZZ".into(), nickname: None, seat: None }).await;
    assert!(stranger.closed().await.is_some_and(|r| r.contains("code")));
    let mut stranger = Page::open(class.addr).await;
    stranger.send(&ToServer::Teach { token: "0".repeat(32) }).await;
    assert!(stranger.closed().await.is_some_and(|r| r.contains("teacher")));
    // A page that says nothing useful first is closed.
    let mut stranger = Page::open(class.addr).await;
    stranger.send(&ToServer::Goto { step: 0 }).await;
    assert!(stranger.closed().await.is_some());
    // The dashboard shows Ana online again (and the newcomer).
    teacher
        .until("the student back", |m| {
            matches!(m, ToClient::Dashboard { board } if board.students.len() == 2 && board.students[0].online)
        })
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// "Send my view": the teacher's scene, prompt, head and position reach
/// every student; one the lesson's model does not have is refused with the
/// reason; a student who joins on that step gets the view too, one who
/// joins after the teacher moved on does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_teachers_view_reaches_every_student_and_latecomers_on_that_step() {
    let dir = temp_dir("view");
    let (class, _server) = serve(&dir, "attention").await;
    let (layers, heads, ctx) = class.lesson.model.expect("the lesson's model");
    let mut teacher = Page::teacher(class.addr, &class.token).await;
    let (mut a, _) = Page::student(class.addr, &class.code, None).await;
    let (mut b, _) = Page::student(class.addr, &class.code, None).await;
    let view = SharedView {
        scene: "attention".into(),
        prompt: Some("abcabcabc".into()),
        head: Some((layers - 1, heads - 1)),
        position: Some(ctx.min(9) - 1),
    };
    // Out of the model first: refused, with the reason, and sent to nobody.
    let bad = SharedView { head: Some((layers, 0)), ..view.clone() };
    teacher.send(&ToServer::View { view: bad }).await;
    let ToClient::Refused { reason } = teacher.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await else {
        unreachable!()
    };
    assert!(reason.contains("head"), "{reason}");
    teacher.send(&ToServer::View { view: view.clone() }).await;
    for page in [&mut a, &mut b] {
        let got = page.until("the view", |m| matches!(m, ToClient::View { .. })).await;
        assert_eq!(got, ToClient::View { view: view.clone() }, "the first view a student gets is the good one");
    }
    let (mut late, _) = Page::student(class.addr, &class.code, None).await;
    let got = late.until("the view", |m| matches!(m, ToClient::View { .. })).await;
    assert_eq!(got, ToClient::View { view: view.clone() });
    // The teacher moves on: the view stays with its step.
    teacher.send(&ToServer::Goto { step: 1 }).await;
    late.until("the next step", |m| matches!(m, ToClient::Class { state } if state.step == 1)).await;
    let mut later = Page::open(class.addr).await;
    later.send(&ToServer::Join { code: class.code.clone(), nickname: None, seat: None }).await;
    later.until("the class", |m| matches!(m, ToClient::Class { .. })).await;
    // The next thing it is sent is the teacher's pause, not the old view.
    teacher.send(&ToServer::Pause { paused: true }).await;
    let next = later.until("the pause", |m| !matches!(m, ToClient::Dashboard { .. })).await;
    assert!(matches!(next, ToClient::Class { ref state } if state.paused), "no stale view before the pause: {next:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversized_and_flooding_messages_are_refused_and_the_class_goes_on() {
    let dir = temp_dir("abuse");
    let (class, _server) = serve(&dir, "attention").await;
    let (mut page, _) = Page::student(class.addr, &class.code, None).await;
    // Malformed: refused with the reason, the page stays.
    for bad in ["not json", r#"{"type":"choose","step":"x"}"#, r#"{"type":"choose","step":0,"choice":0,"x":1}"#, r#"{"type":"launch"}"#] {
        page.send_text(bad.to_string()).await;
        let ToClient::Refused { reason } = page.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await else {
            unreachable!()
        };
        assert!(reason.contains("protocol"), "{reason}");
    }
    // A nickname too long is refused at the door.
    let mut long = Page::open(class.addr).await;
    long.send(&ToServer::Join { code: class.code.clone(), nickname: Some("n".repeat(40)), seat: None }).await;
    assert!(long.closed().await.is_some_and(|r| r.contains("nickname")));
    // Oversized: the connection is closed.
    let (mut big, _) = Page::student(class.addr, &class.code, None).await;
    let _ = big.ws.send(Message::text(format!("{{\"type\":\"at\",\"step\":0,\"pad\":\"{}\"}}", "x".repeat(MAX_MESSAGE_BYTES)))).await;
    // (`closed` waits until the server hangs up.)
    big.closed().await;
    // Flooding: refused beyond the rate, then disconnected.
    let (mut flood, _) = Page::student(class.addr, &class.code, None).await;
    for _ in 0..400 {
        if flood.ws.send(Message::text(ToServer::At { step: 0 }.to_text())).await.is_err() {
            break;
        }
    }
    let reason = flood.closed().await;
    assert!(reason.is_some_and(|r| r.contains("too many") || r.contains("flood") || r.contains("refused")));
    // The class goes on for everyone else.
    let mut teacher = Page::teacher(class.addr, &class.token).await;
    teacher.send(&ToServer::Goto { step: 1 }).await;
    page.until("the step", |m| matches!(m, ToClient::Class { state } if state.step == 1)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_class_killed_with_sigkill_resumes_with_every_acknowledged_answer() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = temp_dir("kill");
    let session = dir.join("class.jsonl");
    let launch = |port: u16| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .args(["class", "--lesson", "attention", "--port", &port.to_string(), "--session"])
            .arg(&session)
            .arg("--web")
            .arg(dir.join("no-web-build"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("tinygpt class starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let teacher = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.contains("teacher=") && !l.contains("tinygpt app"))
            .expect("it prints the teacher's link");
        std::thread::spawn(move || lines.for_each(drop));
        let link = teacher.trim();
        let port: u16 = link["http://127.0.0.1:".len()..].split('/').next().unwrap().parse().unwrap();
        let fragment = link.split('#').nth(1).unwrap();
        let get = |k: &str| fragment.split('&').find_map(|p| p.strip_prefix(&format!("{k}="))).unwrap().to_string();
        (child, port, get("class"), get("teacher"))
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (mut child, port, code, token) = launch(0);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let lesson = LessonShape::builtin("attention").unwrap();
    let (q, choices) = question_step(&lesson);
    let acknowledged = runtime.block_on(async {
        let mut teacher = Page::teacher(addr, &token).await;
        teacher.send(&ToServer::Goto { step: q }).await;
        let mut acknowledged = Vec::new();
        for i in 0..12 {
            let (mut page, seat) = Page::student(addr, &code, None).await;
            page.until("the step", |m| matches!(m, ToClient::Class { state } if state.step == q)).await;
            page.send(&ToServer::Choose { step: q, choice: i % choices }).await;
            page.until("the acknowledgement", |m| matches!(m, ToClient::Accepted { .. })).await;
            acknowledged.push((seat.id, i % choices));
        }
        acknowledged
    });
    // SIGKILL: no chance to flush anything.
    child.kill().unwrap();
    child.wait().unwrap();
    let (mut child, port, code2, token2) = launch(0);
    assert_eq!((code2, token2.clone()), (code, token), "the same class, resumed");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    runtime.block_on(async {
        let mut teacher = Page::teacher(addr, &token2).await;
        let ToClient::Class { state } = teacher.until("the class", |m| matches!(m, ToClient::Class { .. })).await else {
            unreachable!()
        };
        assert_eq!(state.step, q, "the teacher's step survives");
        teacher.send(&ToServer::Csv).await;
        let ToClient::Csv { text } = teacher.until("the CSV", |m| matches!(m, ToClient::Csv { .. })).await else {
            unreachable!()
        };
        for (id, choice) in &acknowledged {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{id},{},", q + 1)) && l.split(',').nth(3) == Some(&(choice + 1).to_string())),
                "answer of student {id} lost:\n{text}"
            );
        }
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_that_is_not_a_class_is_never_taken_over() {
    let dir = temp_dir("files");
    let mine = dir.join("notes.txt");
    std::fs::write(&mine, "my lesson notes\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["class", "--port", "0", "--session"])
        .arg(&mine)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("notes.txt") && err.contains("--session"), "{err}");
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "my lesson notes\n");
    #[cfg(unix)]
    {
        let link = dir.join("link.jsonl");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .args(["class", "--port", "0", "--session"])
            .arg(&link)
            .output()
            .unwrap();
        assert!(!out.status.success(), "a symlink is not followed");
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "my lesson notes\n");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["class", "--port", "0", "--lesson", "no-such-lesson", "--session"])
        .arg(dir.join("new.jsonl"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("attention"), "the refusal lists the lessons");
    assert!(!dir.join("new.jsonl").exists(), "nothing is left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Accepts the server's certificate whatever it is, and keeps it: the test
/// checks the server presented the one it was given.
#[derive(Debug)]
struct KeepCertificate {
    seen: std::sync::Mutex<Vec<Vec<u8>>>,
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
}

use tokio_rustls::rustls;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

impl ServerCertVerifier for KeepCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.seen.lock().unwrap().push(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A page over wss: the TLS handshake, then the WebSocket's.
async fn open_wss(
    addr: SocketAddr,
    verifier: std::sync::Arc<KeepCertificate>,
) -> tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let config = rustls::ClientConfig::builder_with_provider(verifier.provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the TLS handshake");
    let (ws, _) = tokio_tungstenite::client_async(format!("wss://localhost:{}/class/ws", addr.port()), tls)
        .await
        .expect("the WebSocket handshake over TLS");
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_served_with_tls_speaks_wss_with_its_certificate_and_refuses_plain_http() {
    use rustls::pki_types::pem::PemObject;
    let dir = temp_dir("tls");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/class-tls");
    let (cert, key) = (fixtures.join("cert.pem"), fixtures.join("key.pem"));
    let (class, serving) = start(ClassOptions {
        bind: "127.0.0.1".parse().unwrap(),
        port: 0,
        session: dir.join("class.jsonl"),
        lesson: Some("next-byte".into()),
        web: dir.join("no-web-build"),
        tls: Some((cert.clone(), key.clone())),
    })
    .await
    .expect("the class starts with the certificate");
    let serving = tokio::spawn(serving);
    assert_eq!(class.scheme(), "https");

    // A student and the teacher over wss; the teacher's step reaches the
    // student.
    let verifier = std::sync::Arc::new(KeepCertificate {
        seen: Default::default(),
        provider: std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    });
    let mut student = open_wss(class.addr, verifier.clone()).await;
    student
        .send(Message::text(ToServer::Join { code: class.code.clone(), nickname: None, seat: None }.to_text()))
        .await
        .unwrap();
    let mut teacher = open_wss(class.addr, verifier.clone()).await;
    teacher.send(Message::text(ToServer::Teach { token: class.token.clone() }.to_text())).await.unwrap();
    async fn until(
        ws: &mut tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
        want: impl Fn(&ToClient) -> bool,
    ) -> ToClient {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("a message within 10 s")
                .expect("the socket is open")
                .expect("a frame");
            if let Message::Text(t) = m {
                let m = ToClient::parse(t.as_str()).unwrap();
                if want(&m) {
                    return m;
                }
            }
        }
    }
    until(&mut student, |m| matches!(m, ToClient::Welcome { role: Role::Student, .. })).await;
    until(&mut teacher, |m| matches!(m, ToClient::Welcome { role: Role::Teacher, .. })).await;
    teacher.send(Message::text(ToServer::Goto { step: 1 }.to_text())).await.unwrap();
    until(&mut student, |m| matches!(m, ToClient::Class { state } if state.step == 1)).await;
    let served = CertificateDer::from_pem_file(&cert).unwrap().to_vec();
    let seen = verifier.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|c| *c == served), "the server presents the certificate it was given");

    // Plain http to the same port gets no page: the bytes are not a TLS
    // handshake, and the connection closes.
    let mut plain = tokio::net::TcpStream::connect(class.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    plain.write_all(b"GET /join HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), plain.read_to_end(&mut reply)).await;
    assert!(!String::from_utf8_lossy(&reply).contains("HTTP/1.1 200"), "no page over plain http");
    serving.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_certificate_that_cannot_be_used_is_named_and_no_class_file_is_made() {
    let dir = temp_dir("tls-bad");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/class-tls");
    let other_key = dir.join("other-key.pem");
    // A valid key of another pair (PKCS#8 P-256, from the same fixture's
    // format): the certificate's and this key do not match.
    let out = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
        .arg(&other_key)
        .output();
    let session = dir.join("class.jsonl");
    let mut cases: Vec<(PathBuf, PathBuf, &str)> = vec![
        (dir.join("missing.pem"), fixtures.join("key.pem"), "missing.pem"),
        (fixtures.join("key.pem"), fixtures.join("key.pem"), "no certificate"),
        (fixtures.join("cert.pem"), fixtures.join("cert.pem"), "no private key"),
        (fixtures.clone(), fixtures.join("key.pem"), "is not a file"),
    ];
    if out.is_ok_and(|o| o.status.success()) {
        cases.push((fixtures.join("cert.pem"), other_key.clone(), "do not make a certificate and its key"));
    }
    for (cert, key, says) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .args(["class", "--port", "0", "--session"])
            .arg(&session)
            .arg("--tls")
            .args([&cert, &key])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says) && err.contains("openssl req"), "{says}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!session.exists(), "no class file is made");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_experiment_assigns_values_takes_predictions_first_and_overlays_the_curves() {
    use tinygpt::class::experiment::{Knob, ClassSweep};
    let dir = temp_dir("experiment");
    let (class, _server) = serve(&dir, "next-byte").await;
    let mut teacher = Page::teacher(class.addr, &class.token).await;
    let (mut ana, _) = Page::student(class.addr, &class.code, Some("Ana")).await;
    let (mut ben, _) = Page::student(class.addr, &class.code, None).await;
    let sweep = ClassSweep { knob: Knob::LrScale, values: vec![0.1, 1.0, 10.0, 100.0], steps: 100 };
    // A student cannot start one; a sweep that does not fit is refused.
    ana.send(&ToServer::Experiment { sweep: Some(sweep.clone()) }).await;
    ana.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    teacher.send(&ToServer::Experiment { sweep: Some(ClassSweep { values: vec![1.0], ..sweep.clone() }) }).await;
    teacher.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    teacher.send(&ToServer::Experiment { sweep: Some(sweep.clone()) }).await;
    // Join numbers go round the values.
    for (page, value) in [(&mut ana, 0), (&mut ben, 1)] {
        let ToClient::Assigned { assignment: Some(a) } =
            page.until("the assignment", |m| matches!(m, ToClient::Assigned { .. })).await
        else {
            panic!("an assignment")
        };
        assert_eq!((a.value, a.predicted, a.reported_to, a.sweep), (value, None, None, sweep.clone()));
    }
    // Predictions: one per value, once, before the run.
    ana.send(&ToServer::Predict { diverges: vec![false, false, true, true] }).await;
    let m = ana.until("the acknowledgement", |m| matches!(m, ToClient::Assigned { .. } | ToClient::Refused { .. })).await;
    assert!(matches!(m, ToClient::Assigned { assignment: Some(ref a) } if a.predicted == Some(vec![false, false, true, true])), "{m:?}");
    ana.send(&ToServer::Predict { diverges: vec![true, true, true, true] }).await;
    ana.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    ben.send(&ToServer::Predict { diverges: vec![true] }).await;
    ben.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    // Curves: Ana's trains, Ben's goes non-finite; the teacher gets both.
    ana.send(&ToServer::Curve { points: vec![(1, Some(5.5)), (2, Some(5.0)), (4, Some(4.2))] }).await;
    ben.send(&ToServer::Curve { points: vec![(1, Some(5.5)), (2, None)] }).await;
    ben.send(&ToServer::Predict { diverges: vec![false; 4] }).await;
    let ToClient::Refused { reason } = ben.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await else {
        unreachable!()
    };
    assert!(reason.contains("before"), "a prediction after the run: {reason}");
    // Steps out of order, past the run, or too many are refused.
    ana.send(&ToServer::Curve { points: vec![(9, Some(4.0)), (8, Some(4.0))] }).await;
    ana.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    ana.send(&ToServer::Curve { points: vec![(101, Some(4.0))] }).await;
    ana.until("the refusal", |m| matches!(m, ToClient::Refused { .. })).await;
    let mut got = std::collections::BTreeMap::new();
    while got.len() < 2 {
        if let ToClient::Curve { round, id, value, points, .. } =
            teacher.until("a curve", |m| matches!(m, ToClient::Curve { .. })).await
        {
            assert_eq!(round, 1);
            got.insert(id, (value, points));
        }
    }
    assert_eq!(got[&1], (0, vec![(1, Some(5.5)), (2, Some(5.0)), (4, Some(4.2))]));
    assert_eq!(got[&2], (1, vec![(1, Some(5.5)), (2, None)]));
    // The dashboard sets the predictions beside what happened.
    let ToClient::Dashboard { board } = teacher
        .until("the board", |m| {
            matches!(m, ToClient::Dashboard { board } if board.experiment.as_ref().is_some_and(|e| e.rows[1].reporting == 1 && e.rows[0].reporting == 1))
        })
        .await
    else {
        unreachable!()
    };
    let rows = board.experiment.unwrap().rows;
    assert_eq!((rows[0].students, rows[0].diverged, rows[0].median_loss), (1, 0, Some(4.2)));
    assert_eq!((rows[1].students, rows[1].diverged, rows[1].median_loss), (1, 1, None));
    assert_eq!(
        rows.iter().map(|r| (r.predicted_diverge, r.predictions)).collect::<Vec<_>>(),
        vec![(0, 1), (0, 1), (1, 1), (1, 1)]
    );
    // A late student gets the next value; a teacher's page that reloads
    // gets every curve so far.
    let (mut late, _) = Page::student(class.addr, &class.code, None).await;
    let m = late.until("the assignment", |m| matches!(m, ToClient::Assigned { .. })).await;
    assert!(matches!(m, ToClient::Assigned { assignment: Some(ref a) } if a.value == 2), "{m:?}");
    let mut again = Page::teacher(class.addr, &class.token).await;
    let mut ids = Vec::new();
    while ids.len() < 2 {
        if let ToClient::Curve { id, restart: true, .. } = again.until("a curve", |m| matches!(m, ToClient::Curve { .. })).await {
            ids.push(id);
        }
    }
    ids.sort();
    assert_eq!(ids, vec![1, 2]);
    // The class's file holds it all: replayed, the same experiment.
    teacher.send(&ToServer::Csv).await;
    let ToClient::Csv { text } = teacher.until("the CSV", |m| matches!(m, ToClient::Csv { .. })).await else {
        unreachable!()
    };
    assert_eq!(text.lines().filter(|l| l.contains(",experiment,")).count(), 4, "{text}");
    assert!(text.contains("\"Will the run with ×100 diverge?\",1,\"diverges\","), "{text}");
    let records = tinygpt::class::log::SessionLog::records(&dir.join("class.jsonl")).unwrap();
    let replayed = tinygpt::class::session::Session::replay(&records).unwrap();
    let e = replayed.experiment.expect("the experiment is on file");
    assert_eq!((e.sweep, e.predictions.len(), e.curves.len()), (sweep, 1, 2));
    // Ended: every student hears it.
    teacher.send(&ToServer::Experiment { sweep: None }).await;
    ana.until("the end of the experiment", |m| matches!(m, ToClient::Assigned { assignment: None })).await;
    let _ = std::fs::remove_dir_all(&dir);
}
