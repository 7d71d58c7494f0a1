//! A classroom's load on `tinygpt class` (issue 57), on loopback: N
//! simulated students (default 200) join one class; the teacher moves
//! through the lesson's steps, and each time we measure how long until the
//! last student has the new step; then every student answers the question
//! and we check that the teacher's bars and the CSV count every answer
//! exactly. Prints the server's memory (its VmRSS) as well.
//!
//! Then the class experiment: the teacher sweeps the learning rate over
//! four values, every student predicts at once, and every student's page
//! reports its 300-step loss curve in ten messages, one a second, as a
//! training page does; we measure how long until the teacher has each
//! second's 200 messages, check that the teacher's curves and dashboard
//! have every point and prediction, then SIGKILL the server, start it
//! again on its class file and count the points the teacher gets back.
//!
//! cargo build --release && cargo run --release --example class_load [-- STUDENTS ROUNDS]
//!
//! It runs the real binary (`target/release/tinygpt`, beside this example's
//! folder), so the server is measured alone.

use futures_util::{SinkExt, StreamExt};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tinygpt::class::experiment::{ClassSweep, Knob, Point};
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
    let session = dir.join("class.jsonl");
    let (mut child, addr, code, token) = launch(&tinygpt, &session);
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
        let (assigned_tx, mut assigned_rx) = mpsc::unbounded_channel::<(usize, usize, bool)>();
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
            let (seen, ack, assigned) = (seen_tx.clone(), ack_tx.clone(), assigned_tx.clone());
            tokio::spawn(async move {
                while let Some(Ok(Message::Text(t))) = rx.next().await {
                    match ToClient::parse(t.as_str()) {
                        Ok(ToClient::Class { state }) => {
                            let _ = seen.send((i, state.step, Instant::now()));
                        }
                        Ok(ToClient::Accepted { .. }) => {
                            let _ = ack.send(i);
                        }
                        Ok(ToClient::Assigned { assignment: Some(a) }) => {
                            let _ = assigned.send((i, a.value, a.predicted.is_some()));
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
        let rss = rss_of(child.id());
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

        // The class experiment.
        let sweep = ClassSweep { knob: Knob::LrScale, values: vec![0.1, 1.0, 10.0, 100.0], steps: 300 };
        let diverging = 3;
        let sent = Instant::now();
        to_teacher.send(Message::text(ToServer::Experiment { sweep: Some(sweep.clone()) }.to_text())).await.unwrap();
        let mut value_of = vec![usize::MAX; students];
        for _ in 0..students {
            let (i, value, _) = tokio::time::timeout(Duration::from_secs(10), assigned_rx.recv())
                .await
                .expect("every student is assigned a value within 10 s")
                .unwrap();
            value_of[i] = value;
        }
        let assigned_in = sent.elapsed();
        let sent = Instant::now();
        for (i, tx) in senders.iter_mut().enumerate() {
            let diverges = (0..sweep.values.len()).map(|v| v >= 2 + i % 2).collect();
            tx.send(Message::text(ToServer::Predict { diverges }.to_text())).await.unwrap();
        }
        for _ in 0..students {
            let (_, _, predicted) = tokio::time::timeout(Duration::from_secs(20), assigned_rx.recv())
                .await
                .expect("every prediction acknowledged within 20 s")
                .unwrap();
            assert!(predicted, "the acknowledgement has the prediction");
        }
        let predicted_in = sent.elapsed();
        // The teacher's side on its own task, so arrivals are timed as they come.
        let (curve_tx, mut curve_rx) = mpsc::unbounded_channel::<(usize, Instant)>();
        let (board_tx, mut board_rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(Message::Text(t))) = from_teacher.next().await {
                match ToClient::parse(t.as_str()) {
                    Ok(ToClient::Curve { points, .. }) => {
                        let _ = curve_tx.send((points.len(), Instant::now()));
                    }
                    Ok(ToClient::Dashboard { board }) => {
                        let _ = board_tx.send(board);
                    }
                    _ => {}
                }
            }
        });
        // A page's curve: a falling loss, and for the largest learning rate
        // one that stops being finite at step 40.
        let curve = |value: usize| -> Vec<Point> {
            (1..=sweep.steps)
                .filter(|&s| sweep.keeps(s))
                .map(|s| {
                    let loss = 5.5 / (1.0 + s as f32 / 50.0) + value as f32 * 0.01;
                    (s, (value != diverging || s < 40).then_some(loss))
                })
                .collect()
        };
        let chunks = 10;
        let per_point = curve(0).len();
        let mut each_second = Vec::new();
        let mut points_sent = 0;
        for chunk in 0..chunks {
            let sent = Instant::now();
            for (i, tx) in senders.iter_mut().enumerate() {
                let c = curve(value_of[i]);
                let size = c.len().div_ceil(chunks);
                let part: Vec<Point> = c.iter().skip(chunk * size).take(size).copied().collect();
                points_sent += part.len();
                tx.send(Message::text(ToServer::Curve { points: part }.to_text())).await.unwrap();
            }
            let mut got = 0;
            let mut slowest = Duration::ZERO;
            while got < students {
                let (_, at) = tokio::time::timeout(Duration::from_secs(10), curve_rx.recv())
                    .await
                    .expect("the teacher gets every curve message within 10 s")
                    .unwrap();
                got += 1;
                slowest = slowest.max(at - sent);
            }
            each_second.push(slowest);
            tokio::time::sleep(Duration::from_secs(1).saturating_sub(sent.elapsed())).await;
        }
        // The dashboard: every run reporting and predicted, the diverged ones.
        let in_value = |v: usize| value_of.iter().filter(|&&x| x == v).count() as u32;
        let mut board_ok = false;
        let mut last_rows = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(Some(board)) = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), board_rx.recv()).await {
            if let Some(e) = board.experiment {
                // Every student predicted every value: value v diverges
                // for those with v ≥ 2 + (their number mod 2).
                let predicted_diverge = |v: usize| (0..students).filter(|i| v >= 2 + i % 2).count() as u32;
                board_ok = e.rows.iter().enumerate().all(|(v, r)| {
                    r.students == in_value(v)
                        && r.reporting == in_value(v)
                        && r.predictions == students as u32
                        && r.predicted_diverge == predicted_diverge(v)
                        && r.diverged == if v == diverging { in_value(v) } else { 0 }
                });
                last_rows = e.rows;
                if board_ok {
                    break;
                }
            }
        }
        let rss_after = rss_of(child.id());
        let file_kb = std::fs::metadata(&session).map_or(0, |m| m.len() / 1024);
        println!(
            "experiment: {students} students assigned a value in {:.0} ms; {students} predictions at once acknowledged (on disk) in {:.0} ms",
            ms(assigned_in),
            ms(predicted_in)
        );
        println!(
            "curves: {chunks} seconds of {students} messages ({per_point} points a run, {points_sent} in all); the teacher had each second's {students} in median {:.2} ms, max {:.2} ms",
            pct(&mut each_second, 0.5),
            pct(&mut each_second, 1.0)
        );
        println!("dashboard's rows (students, reporting, predictions, diverged) exact: {board_ok}");
        if !board_ok {
            println!("the last rows: {last_rows:?}");
        }
        println!("server VmRSS after the experiment {rss_after} kB; class file {file_kb} KiB");
        // SIGKILL after a second's quiet, and the teacher of the restarted
        // server gets every curve back.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = child.kill();
        let _ = child.wait();
        let (mut child, addr, _, token) = launch(&tinygpt, &session);
        let (teacher_ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/class/ws")).await.unwrap();
        let (mut to_teacher, mut from_teacher) = teacher_ws.split();
        to_teacher.send(Message::text(ToServer::Teach { token }.to_text())).await.unwrap();
        let mut points_back = 0;
        while let Ok(Some(Ok(Message::Text(t)))) = tokio::time::timeout(Duration::from_secs(3), from_teacher.next()).await {
            if let Ok(ToClient::Curve { points, .. }) = ToClient::parse(t.as_str()) {
                points_back += points.len();
            }
        }
        println!("after SIGKILL and a restart: the teacher got back {points_back} of {points_sent} points");
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        if !exact || !board_ok || points_back != points_sent {
            std::process::exit(1);
        }
    });
}

/// Starts `tinygpt class` on a free port with this class file: the child,
/// its address, the class code and the teacher's token.
fn launch(tinygpt: &std::path::Path, session: &std::path::Path) -> (Child, SocketAddr, String, String) {
    let mut child = Command::new(tinygpt)
        .args(["class", "--lesson", "attention", "--port", "0", "--session"])
        .arg(session)
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
    (child, format!("127.0.0.1:{port}").parse().unwrap(), get("class"), get("teacher"))
}

/// A process's resident memory in kB, from /proc ("?" where there is none).
fn rss_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS")).map(|l| l.split_whitespace().nth(1).unwrap().to_string()))
        .unwrap_or_else(|| "?".into())
}
