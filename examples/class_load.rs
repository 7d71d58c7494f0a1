//! A classroom's load on `tinygpt class` (issue 57), on loopback: N
//! simulated students (default 200) join one class; the teacher moves
//! through the lesson's steps, and each time we measure how long until the
//! last student has the new step; then every student answers the question
//! and we check that the teacher's bars and the CSV count every answer
//! exactly. Prints the server's memory (its VmRSS) as well.
//!
//! cargo build --release && cargo run --release --example class_load [-- STUDENTS ROUNDS]
//!
//! It runs the real binary (`target/release/tinygpt`, beside this example's
//! folder), so the server is measured alone.

use futures_util::{SinkExt, StreamExt};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tinygpt::class::protocol::{ToClient, ToServer};
use tinygpt::class::session::LessonShape;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

fn main() {
    let mut args = std::env::args().skip(1);
    let students: usize = args.next().map_or(200, |a| a.parse().expect("STUDENTS is a number"));
    let rounds: usize = args.next().map_or(20, |a| a.parse().expect("ROUNDS is a number"));
    let exe = std::env::current_exe().unwrap();
    let tinygpt = exe.parent().unwrap().parent().unwrap().join("tinygpt");
    let dir = std::env::temp_dir().join(format!("tinygpt-class-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(&tinygpt)
        .args(["class", "--lesson", "attention", "--port", "0", "--session"])
        .arg(dir.join("class.jsonl"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}): cargo build --release first", tinygpt.display()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let link = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("teacher=") && !l.contains("tinygpt app"))
        .expect("the teacher's link");
    std::thread::spawn(move || lines.for_each(drop));
    let link = link.trim().to_string();
    let port: u16 = link["http://127.0.0.1:".len()..].split('/').next().unwrap().parse().unwrap();
    let fragment = link.split('#').nth(1).unwrap().to_string();
    let get = |k: &str| fragment.split('&').find_map(|p| p.strip_prefix(&format!("{k}="))).unwrap().to_string();
    let (code, token) = (get("class"), get("teacher"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let lesson = LessonShape::builtin("attention").unwrap();
    let steps = lesson.steps.len();
    let (q, choices) = lesson
        .steps
        .iter()
        .enumerate()
        .find_map(|(k, (_, q))| q.as_ref().map(|q| (k, q.choices.len())))
        .unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        let url = format!("ws://{addr}/class/ws");
        let (teacher_ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        let (mut to_teacher, mut from_teacher) = teacher_ws.split();
        to_teacher.send(Message::text(ToServer::Teach { token }.to_text())).await.unwrap();
        // Every student reports (its number, the step) when a step arrives,
        // and its acknowledgements.
        let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<(usize, usize, Instant)>();
        let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<usize>();
        let mut senders = Vec::new();
        let joined_at = Instant::now();
        for i in 0..students {
            let (ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
            let (mut tx, mut rx) = ws.split();
            tx.send(Message::text(
                ToServer::Join { code: code.clone(), nickname: Some(format!("s{i}")), seat: None }.to_text(),
            ))
            .await
            .unwrap();
            let (seen, ack) = (seen_tx.clone(), ack_tx.clone());
            tokio::spawn(async move {
                while let Some(Ok(Message::Text(t))) = rx.next().await {
                    match ToClient::parse(t.as_str()) {
                        Ok(ToClient::Class { state }) => {
                            let _ = seen.send((i, state.step, Instant::now()));
                        }
                        Ok(ToClient::Accepted { .. }) => {
                            let _ = ack.send(i);
                        }
                        _ => {}
                    }
                }
            });
            senders.push(tx);
        }
        // Wait until every student has the class's state once.
        let mut welcomed = 0;
        while welcomed < students {
            seen_rx.recv().await.unwrap();
            welcomed += 1;
        }
        let join_time = joined_at.elapsed();
        let rss = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS")).map(|l| l.split_whitespace().nth(1).unwrap().to_string()))
            .unwrap_or_else(|| "?".into());
        // The teacher's "next step", `rounds` times: time to the last student.
        let mut last = Vec::new();
        let mut each = Vec::new();
        for round in 0..rounds {
            let step = (round + 1) % steps;
            let sent = Instant::now();
            to_teacher.send(Message::text(ToServer::Goto { step }.to_text())).await.unwrap();
            let mut got = 0;
            let mut slowest = Duration::ZERO;
            while got < students {
                let (_, s, at) = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv())
                    .await
                    .expect("every student gets the step within 10 s")
                    .unwrap();
                if s == step {
                    got += 1;
                    let d = at - sent;
                    each.push(d);
                    slowest = slowest.max(d);
                }
            }
            last.push(slowest);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Everyone answers the question at once.
        to_teacher.send(Message::text(ToServer::Goto { step: q }.to_text())).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut want = vec![0u32; choices];
        let sent = Instant::now();
        for (i, tx) in senders.iter_mut().enumerate() {
            want[i % choices] += 1;
            tx.send(Message::text(ToServer::Choose { step: q, choice: i % choices }.to_text())).await.unwrap();
        }
        let mut acks = 0;
        while acks < students {
            tokio::time::timeout(Duration::from_secs(20), ack_rx.recv()).await.expect("acknowledged").unwrap();
            acks += 1;
        }
        let all_acked = sent.elapsed();
        // The teacher's bars and the CSV.
        let mut bars = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(Ok(Message::Text(t)))) = tokio::time::timeout(Duration::from_secs(1), from_teacher.next()).await
                && let Ok(ToClient::Dashboard { board }) = ToClient::parse(t.as_str())
                && let Some(tally) = board.tally(q)
            {
                bars = Some(tally.counts.clone());
                if tally.counts == want {
                    break;
                }
            }
        }
        to_teacher.send(Message::text(ToServer::Csv.to_text())).await.unwrap();
        let mut csv_rows = None;
        while let Ok(Some(Ok(Message::Text(t)))) = tokio::time::timeout(Duration::from_secs(5), from_teacher.next()).await {
            if let Ok(ToClient::Csv { text }) = ToClient::parse(t.as_str()) {
                csv_rows = Some(text.lines().count() - 1);
                break;
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let pct = |v: &mut Vec<Duration>, p: f64| {
            v.sort();
            ms(v[((v.len() - 1) as f64 * p).round() as usize])
        };
        println!("students: {students}, rounds: {rounds} (loopback, this machine)");
        println!("all joined in {:.0} ms; server VmRSS {rss} kB", ms(join_time));
        println!(
            "teacher's next step → last student: median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            pct(&mut last, 0.5),
            pct(&mut last, 0.99),
            pct(&mut last, 1.0)
        );
        println!(
            "→ each student: median {:.2} ms, p99 {:.2} ms",
            pct(&mut each, 0.5),
            pct(&mut each, 0.99)
        );
        println!(
            "{students} answers at once: all acknowledged (on disk) in {:.0} ms; teacher's bars {:?} (sent {:?}); CSV rows {:?}",
            ms(all_acked),
            bars,
            want,
            csv_rows
        );
        let exact = bars.as_ref() == Some(&want) && csv_rows == Some(students);
        println!("answers counted exactly: {exact}");
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        if !exact {
            std::process::exit(1);
        }
    });
}
