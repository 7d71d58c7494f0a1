//! One class as a state machine. Every change is a [`Record`]: the server
//! checks a page's request against the session ([`Session::join`],
//! [`Session::answer`], …, which say why they refuse), writes the record to
//! the log and applies it ([`Session::apply`]). Replaying a log's records
//! ([`Session::replay`]) rebuilds the same class, so a restarted server
//! resumes where it stopped. What is not recorded is what a page says
//! again when it reconnects: where a student is, who is online.

use super::experiment::{self, ExperimentBoard, Point, ClassSweep, SweepRow};
use super::protocol::{
    Assignment, ClassState, Dashboard, MAX_PROMPT_BYTES, Reveal, Seat, SharedView, StudentId, StudentRow,
    Tally,
};
use crate::lesson::Lesson;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The most students one class admits (the server's memory stays bounded).
pub const MAX_STUDENTS: usize = 500;

/// A lesson as the class needs it: its steps' questions.
#[derive(Clone, Debug, PartialEq)]
pub struct LessonShape {
    /// The built-in lesson's name.
    pub name: String,
    pub title: String,
    /// Per step: its title and its question, if it has one.
    pub steps: Vec<(String, Option<QuestionShape>)>,
    /// The lesson's model: blocks, heads per block, context (what a shared
    /// view may point at); None where its preset does not load.
    pub model: Option<(usize, usize, usize)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct QuestionShape {
    pub ask: String,
    pub choices: Vec<String>,
    pub answer: usize,
}

impl LessonShape {
    /// A built-in lesson (the students' pages open it by name, so a class
    /// runs a built-in lesson), in English.
    pub fn builtin(name: &str) -> Result<LessonShape, String> {
        let names: Vec<&str> = crate::lesson::BUILTIN_LESSONS.iter().map(|(n, _)| *n).collect();
        let Some((_, text)) = crate::lesson::BUILTIN_LESSONS.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "`{name}` is not a built-in lesson; a class runs one of: {}",
                names.join(", ")
            ));
        };
        let lesson = Lesson::parse(name, text).map_err(|e| e.to_string())?;
        Ok(LessonShape::of(name, &lesson))
    }

    pub fn of(name: &str, lesson: &Lesson) -> LessonShape {
        LessonShape {
            name: name.to_string(),
            title: lesson.title.clone(),
            steps: lesson
                .steps
                .iter()
                .map(|s| {
                    let q = s.question.as_ref().map(|q| QuestionShape {
                        ask: q.ask.clone(),
                        choices: q.choices.clone(),
                        answer: q.answer,
                    });
                    (s.title.clone(), q)
                })
                .collect(),
            model: crate::model::config::Config::load(&lesson.preset)
                .ok()
                .map(|c| (c.n_layer, c.n_head, c.ctx)),
        }
    }

    fn question(&self, step: usize) -> Option<&QuestionShape> {
        self.steps.get(step).and_then(|(_, q)| q.as_ref())
    }
}

/// One change to the class, as its log holds it (one JSON line each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case", deny_unknown_fields)]
pub enum Record {
    /// The class began: its lesson, join code and the teacher's token.
    Opened {
        lesson: String,
        code: String,
        token: String,
    },
    Joined {
        id: StudentId,
        key: String,
        nickname: Option<String>,
    },
    Answered {
        id: StudentId,
        step: usize,
        choice: usize,
    },
    /// The teacher went to a step.
    Moved { step: usize },
    Paced { locked: bool },
    Paused { paused: bool },
    Revealed { step: usize },
    /// The teacher started the class experiment with a sweep (or ended it).
    Experimented { sweep: Option<ClassSweep> },
    /// A student's prediction: per value, whether its run diverges.
    Predicted { id: StudentId, diverges: Vec<bool> },
    /// Points of a student's loss curve.
    Reported { id: StudentId, points: Vec<Point> },
}

/// The class experiment as it stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Experiment {
    /// Which experiment of the class (1, 2, …).
    pub round: u32,
    pub sweep: ClassSweep,
    /// Each student's prediction (the first stands).
    pub predictions: BTreeMap<StudentId, Vec<bool>>,
    /// Each student's loss curve.
    pub curves: BTreeMap<StudentId, Vec<Point>>,
    /// How many times each student's curve started again.
    pub restarts: BTreeMap<StudentId, u32>,
}

/// A student of the class.
#[derive(Clone, Debug, PartialEq)]
pub struct Student {
    key: String,
    pub nickname: Option<String>,
    /// The step their page is on.
    pub step: usize,
    /// Their page is connected.
    pub online: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    pub lesson: LessonShape,
    pub code: String,
    token: String,
    /// The teacher's step.
    pub step: usize,
    pub paused: bool,
    pub locked: bool,
    pub revealed: BTreeSet<usize>,
    pub students: BTreeMap<StudentId, Student>,
    /// Per step with a question: each student's choice (the first stands).
    pub answers: BTreeMap<usize, BTreeMap<StudentId, usize>>,
    pub experiment: Option<Experiment>,
    /// Experiments started in this class.
    rounds: u32,
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl Session {
    /// A new class (and the record that opens its log). The code and token
    /// come from the caller's random source.
    pub fn open(lesson: LessonShape, code: String, token: String) -> (Session, Record) {
        let record = Record::Opened {
            lesson: lesson.name.clone(),
            code: code.clone(),
            token: token.clone(),
        };
        let session = Session {
            lesson,
            code,
            token,
            step: 0,
            paused: false,
            locked: true,
            revealed: BTreeSet::new(),
            students: BTreeMap::new(),
            answers: BTreeMap::new(),
            experiment: None,
            rounds: 0,
        };
        (session, record)
    }

    /// The class a log's records describe; the first must open it. A
    /// record that does not fit (a step past the lesson's end, an answer of
    /// a student never admitted) is refused with its number.
    pub fn replay(records: &[Record]) -> Result<Session, String> {
        let Some(Record::Opened { lesson, code, token }) = records.first() else {
            return Err("it does not begin with the record that opens a class".into());
        };
        let (mut session, _) = Session::open(LessonShape::builtin(lesson)?, code.clone(), token.clone());
        for (i, r) in records.iter().enumerate().skip(1) {
            session
                .check(r)
                .map_err(|e| format!("record {} does not fit the class ({e})", i + 1))?;
            session.apply(r);
        }
        Ok(session)
    }

    /// Whether `token` is the teacher's (in constant time).
    pub fn is_teacher(&self, token: &str) -> bool {
        same_secret(token, &self.token)
    }

    /// The teacher's token (for the link `tinygpt class` prints).
    pub fn token(&self) -> &str {
        &self.token
    }

    fn steps(&self) -> usize {
        self.lesson.steps.len()
    }

    /// Checks that a record fits the class now (what [`Session::apply`]
    /// assumes).
    fn check(&self, r: &Record) -> Result<(), String> {
        match r {
            Record::Opened { .. } => Err("the class is already open".into()),
            Record::Joined { id, .. } => {
                if self.students.contains_key(id) {
                    Err(format!("student {id} joined already"))
                } else if self.students.len() >= MAX_STUDENTS {
                    Err(format!("the class is full ({MAX_STUDENTS} students)"))
                } else {
                    Ok(())
                }
            }
            Record::Answered { id, step, choice } => self.answer_fits(*id, *step, *choice),
            Record::Moved { step } => self.step_fits(*step),
            Record::Revealed { step } => match self.lesson.question(*step) {
                None => Err(format!("step {} has no question to reveal", step + 1)),
                Some(_) => Ok(()),
            },
            Record::Paced { .. } | Record::Paused { .. } => Ok(()),
            Record::Experimented { sweep } => sweep.as_ref().map_or(Ok(()), ClassSweep::check),
            Record::Predicted { id, diverges } => {
                let e = self.experiment_of(*id)?;
                if diverges.len() != e.sweep.values.len() {
                    return Err(format!(
                        "a prediction says, for each of the sweep's {} values, whether its run diverges",
                        e.sweep.values.len()
                    ));
                }
                if e.predictions.contains_key(id) {
                    return Err("you predicted already".into());
                }
                if e.curves.contains_key(id) {
                    return Err("predictions are made before your run starts".into());
                }
                Ok(())
            }
            Record::Reported { id, points } => {
                let e = self.experiment_of(*id)?;
                let curve = e.curves.get(id).map_or(&[][..], Vec::as_slice);
                let restart = experiment::check_points(curve, points, e.sweep.steps)?;
                if restart && e.restarts.get(id).copied().unwrap_or(0) >= experiment::MAX_RESTARTS {
                    return Err(format!(
                        "your run has started again {} times in this experiment: keep the one you have",
                        experiment::MAX_RESTARTS
                    ));
                }
                Ok(())
            }
        }
    }

    /// The experiment, for a student of the class.
    fn experiment_of(&self, id: StudentId) -> Result<&Experiment, String> {
        if !self.students.contains_key(&id) {
            return Err(format!("there is no student {id} in this class"));
        }
        self.experiment.as_ref().ok_or_else(|| "the class has no experiment now".to_string())
    }

    fn step_fits(&self, step: usize) -> Result<(), String> {
        if step < self.steps() {
            Ok(())
        } else {
            Err(format!(
                "the lesson has {} steps; there is no step {}",
                self.steps(),
                step + 1
            ))
        }
    }

    fn answer_fits(&self, id: StudentId, step: usize, choice: usize) -> Result<(), String> {
        if !self.students.contains_key(&id) {
            return Err(format!("there is no student {id} in this class"));
        }
        let Some(q) = self.lesson.question(step) else {
            return Err(format!("step {} has no question", step + 1));
        };
        if choice >= q.choices.len() {
            return Err(format!(
                "the question of step {} has {} choices; there is no choice {}",
                step + 1,
                q.choices.len(),
                choice + 1
            ));
        }
        if self.answers.get(&step).is_some_and(|a| a.contains_key(&id)) {
            return Err(format!("you answered step {}'s question already", step + 1));
        }
        Ok(())
    }

    /// Applies a record that [`Session::check`] passed.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Opened { .. } => {}
            Record::Joined { id, key, nickname } => {
                self.students.insert(
                    *id,
                    Student {
                        key: key.clone(),
                        nickname: nickname.clone(),
                        step: self.step,
                        online: false,
                    },
                );
            }
            Record::Answered { id, step, choice } => {
                self.answers.entry(*step).or_default().entry(*id).or_insert(*choice);
            }
            Record::Moved { step } => self.step = *step,
            Record::Paced { locked } => self.locked = *locked,
            Record::Paused { paused } => self.paused = *paused,
            Record::Revealed { step } => {
                self.revealed.insert(*step);
            }
            Record::Experimented { sweep } => {
                self.rounds += u32::from(sweep.is_some());
                let round = self.rounds;
                self.experiment = sweep.clone().map(|sweep| Experiment {
                    round,
                    sweep,
                    predictions: BTreeMap::new(),
                    curves: BTreeMap::new(),
                    restarts: BTreeMap::new(),
                });
            }
            Record::Predicted { id, diverges } => {
                if let Some(e) = self.experiment.as_mut() {
                    e.predictions.entry(*id).or_insert_with(|| diverges.clone());
                }
            }
            Record::Reported { id, points } => {
                if let Some(e) = self.experiment.as_mut() {
                    let curve = e.curves.entry(*id).or_default();
                    if experiment::starts_again(curve, points) {
                        curve.clear();
                        *e.restarts.entry(*id).or_default() += 1;
                    }
                    curve.extend_from_slice(points);
                }
            }
        }
    }

    /// A record for a request, if it fits the class now.
    pub fn checked(&self, r: Record) -> Result<Record, String> {
        self.check(&r)?;
        Ok(r)
    }

    /// A student's part in the experiment, if there is one.
    pub fn assignment(&self, id: StudentId) -> Option<Assignment> {
        let e = self.experiment.as_ref()?;
        Some(Assignment {
            sweep: e.sweep.clone(),
            value: e.sweep.value_of(id),
            predicted: e.predictions.get(&id).cloned(),
            reported_to: e.curves.get(&id).and_then(|c| c.last()).map(|(s, _)| *s),
        })
    }

    /// The experiment on the dashboard: per value, the students given it,
    /// their runs and the class's predictions.
    fn experiment_board(&self) -> Option<ExperimentBoard> {
        let e = self.experiment.as_ref()?;
        let mut rows = vec![SweepRow::default(); e.sweep.values.len()];
        let mut latest: Vec<Vec<f32>> = vec![Vec::new(); rows.len()];
        for id in self.students.keys() {
            let v = e.sweep.value_of(*id);
            rows[v].students += 1;
            if let Some(curve) = e.curves.get(id).filter(|c| !c.is_empty()) {
                rows[v].reporting += 1;
                rows[v].diverged += u32::from(experiment::diverged(curve));
                latest[v].extend(curve.last().and_then(|(_, l)| *l));
            }
        }
        for prediction in e.predictions.values() {
            for (row, says) in rows.iter_mut().zip(prediction) {
                row.predictions += 1;
                row.predicted_diverge += u32::from(*says);
            }
        }
        for (row, losses) in rows.iter_mut().zip(latest) {
            row.median_loss = experiment::median(losses);
        }
        Some(ExperimentBoard { round: e.round, sweep: e.sweep.clone(), rows })
    }

    /// A new student (the key from the caller's random source).
    pub fn join(&self, key: String, nickname: Option<String>) -> Result<Record, String> {
        let id = self.students.keys().next_back().map_or(1, |k| k + 1);
        let r = Record::Joined { id, key, nickname };
        self.check(&r)?;
        Ok(r)
    }

    /// A student back in their seat.
    pub fn rejoin(&self, seat: &Seat) -> Result<StudentId, String> {
        match self.students.get(&seat.id) {
            Some(s) if same_secret(&seat.key, &s.key) => Ok(seat.id),
            _ => Err("that seat is not in this class; join again with the code".into()),
        }
    }

    /// A student's answer, refused once revealed, past the teacher's step
    /// when paced, or answered already.
    pub fn answer(&self, id: StudentId, step: usize, choice: usize) -> Result<Record, String> {
        if self.revealed.contains(&step) {
            return Err(format!("step {}'s answer is shown already", step + 1));
        }
        if self.locked && step > self.step {
            return Err(format!("the class is not at step {} yet", step + 1));
        }
        self.answer_fits(id, step, choice)?;
        Ok(Record::Answered { id, step, choice })
    }

    /// Where a student says they are.
    pub fn student_at(&mut self, id: StudentId, step: usize) -> Result<(), String> {
        self.step_fits(step)?;
        if self.locked && step > self.step {
            return Err(format!("the class is not at step {} yet", step + 1));
        }
        if let Some(s) = self.students.get_mut(&id) {
            s.step = step;
        }
        Ok(())
    }

    pub fn set_online(&mut self, id: StudentId, online: bool) {
        if let Some(s) = self.students.get_mut(&id) {
            s.online = online;
            if online && self.locked {
                s.step = s.step.min(self.step);
            }
        }
    }

    /// The teacher goes to a step: every student follows.
    pub fn goto(&self, step: usize) -> Result<Record, String> {
        self.step_fits(step)?;
        Ok(Record::Moved { step })
    }

    pub fn reveal(&self, step: usize) -> Result<Record, String> {
        let r = Record::Revealed { step };
        self.check(&r)?;
        Ok(r)
    }

    /// After the teacher moved: every student is on the teacher's step.
    pub fn follow_teacher(&mut self) {
        let step = self.step;
        for s in self.students.values_mut() {
            s.step = step;
        }
    }

    /// A "send my view" checked: a scene the lessons know, a short prompt,
    /// a head and a position the lesson's model has.
    pub fn check_view(&self, view: &SharedView) -> Result<(), String> {
        let scene = view.scene.as_str();
        if !crate::lesson::SCENES.contains(&scene) {
            return Err(format!("`{scene}` is not a scene"));
        }
        if view.prompt.as_ref().is_some_and(|p| p.len() > MAX_PROMPT_BYTES) {
            return Err(format!("a shared prompt has at most {MAX_PROMPT_BYTES} bytes"));
        }
        let (layers, heads, ctx) = self.lesson.model.unwrap_or((0, 0, 0));
        if let Some((layer, head)) = view.head
            && (layer >= layers || head >= heads)
        {
            return Err(format!(
                "no head ({layer}, {head}) in the lesson's model: {layers} blocks of {heads} heads (0-based)"
            ));
        }
        if let Some(p) = view.position
            && p >= ctx
        {
            return Err(format!("no position {p} in the lesson's model: its context is {ctx} bytes (0-based)"));
        }
        Ok(())
    }

    fn counts(&self, step: usize) -> Vec<u32> {
        let n = self.lesson.question(step).map_or(0, |q| q.choices.len());
        let mut counts = vec![0u32; n];
        for c in self.answers.get(&step).into_iter().flat_map(|a| a.values()) {
            counts[*c] += 1;
        }
        counts
    }

    pub fn state(&self) -> ClassState {
        ClassState {
            step: self.step,
            paused: self.paused,
            locked: self.locked,
            reveals: self
                .revealed
                .iter()
                .filter_map(|&step| {
                    let q = self.lesson.question(step)?;
                    Some(Reveal {
                        step,
                        answer: q.answer,
                        counts: self.counts(step),
                    })
                })
                .collect(),
        }
    }

    pub fn dashboard(&self) -> Dashboard {
        Dashboard {
            students: self
                .students
                .iter()
                .map(|(id, s)| StudentRow {
                    id: *id,
                    nickname: s.nickname.clone(),
                    step: s.step,
                    online: s.online,
                    answered: self.answers.values().filter(|a| a.contains_key(id)).count(),
                })
                .collect(),
            tallies: (0..self.steps())
                .filter(|&s| self.lesson.question(s).is_some())
                .map(|step| Tally {
                    step,
                    counts: self.counts(step),
                })
                .collect(),
            experiment: self.experiment_board(),
        }
    }

    /// A student's answers on record: (step, choice).
    pub fn answers_of(&self, id: StudentId) -> Vec<(usize, usize)> {
        self.answers
            .iter()
            .filter_map(|(step, a)| a.get(&id).map(|c| (*step, *c)))
            .collect()
    }

    /// Every answer, anonymous (join numbers, no nicknames), as CSV.
    pub fn csv(&self) -> String {
        let mut out = String::from("student,step,question,choice,answer,correct\n");
        for (step, answers) in &self.answers {
            let Some(q) = self.lesson.question(*step) else { continue };
            for (id, choice) in answers {
                out.push_str(&format!(
                    "{id},{},{},{},{},{}\n",
                    step + 1,
                    csv_field(&q.ask),
                    choice + 1,
                    csv_field(&q.choices[*choice]),
                    *choice == q.answer
                ));
            }
        }
        // The experiment's predictions, one row per value: what the
        // student said, and whether it came true (the majority of that
        // value's runs, once one reported; empty before).
        if let Some(e) = &self.experiment {
            let board = self.experiment_board();
            for (id, prediction) in &e.predictions {
                for (v, says) in prediction.iter().enumerate() {
                    let said = if *says { "diverges" } else { "trains" };
                    let happened = board.as_ref().and_then(|b| b.rows.get(v)).filter(|r| r.reporting > 0).map(
                        |r| if 2 * r.diverged > r.reporting { "diverges" } else { "trains" },
                    );
                    out.push_str(&format!(
                        "{id},experiment,{},{},{},{}\n",
                        csv_field(&format!("Will the run with {} diverge?", e.sweep.label(v))),
                        u8::from(!*says) + 1,
                        csv_field(said),
                        happened.map_or(String::new(), |h| (h == said).to_string()),
                    ));
                }
            }
        }
        out
    }
}

/// A CSV field, quoted (RFC 4180).
fn csv_field(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class() -> Session {
        Session::open(LessonShape::builtin("attention").unwrap(), "ABCDEF".into(), "t".repeat(32)).0
    }

    #[test]
    fn a_shared_view_points_only_at_what_the_lessons_model_has() {
        let s = class();
        let (layers, heads, ctx) = s.lesson.model.expect("the attention lesson's preset loads");
        let view = |head: Option<(usize, usize)>, position: Option<usize>| SharedView {
            scene: "attention".into(),
            prompt: Some("abcabc".into()),
            head,
            position,
        };
        assert_eq!(s.check_view(&view(Some((layers - 1, heads - 1)), Some(ctx - 1))), Ok(()));
        for bad in [
            view(Some((layers, 0)), None),
            view(Some((0, heads)), None),
            view(None, Some(ctx)),
            SharedView { scene: "nowhere".into(), ..Default::default() },
            SharedView { scene: "flow".into(), prompt: Some("x".repeat(MAX_PROMPT_BYTES + 1)), ..Default::default() },
        ] {
            let why = s.check_view(&bad).expect_err("refused");
            assert!(!why.is_empty() && !why.contains('\n'), "{why:?}");
        }
    }

    fn question_step(s: &Session) -> usize {
        (0..s.steps()).find(|&k| s.lesson.question(k).is_some()).expect("the lesson asks")
    }

    #[test]
    fn a_replayed_log_is_the_same_class() {
        let mut s = class();
        let (_, opened) = Session::open(s.lesson.clone(), s.code.clone(), s.token.clone());
        let mut log = vec![opened];
        let q = question_step(&s);
        for r in [
            s.join("k1".into(), Some("Ana".into())).unwrap(),
        ] {
            s.apply(&r);
            log.push(r);
        }
        let r = s.join("k2".into(), None).unwrap();
        s.apply(&r);
        log.push(r);
        for r in [s.goto(q).unwrap()] {
            s.apply(&r);
            log.push(r);
        }
        for r in [s.answer(1, q, 0).unwrap(), s.answer(2, q, 1).unwrap()] {
            s.apply(&r);
            log.push(r);
        }
        let r = s.reveal(q).unwrap();
        s.apply(&r);
        log.push(r);
        let replayed = Session::replay(&log).unwrap();
        assert_eq!(replayed.state(), s.state());
        assert_eq!(replayed.csv(), s.csv());
        assert_eq!(replayed.answers_of(2), vec![(q, 1)]);
        assert_eq!(s.state().reveals[0].counts.iter().sum::<u32>(), 2);
    }

    #[test]
    fn an_experiment_replays_from_its_records_and_a_new_one_starts_afresh() {
        use crate::class::experiment::Knob;
        let mut s = class();
        let (_, opened) = Session::open(s.lesson.clone(), s.code.clone(), s.token.clone());
        let mut log = vec![opened];
        let mut push = |s: &mut Session, r: Record| {
            s.apply(&r);
            log.push(r);
        };
        for key in ["k1", "k2", "k3"] {
            let r = s.join(key.into(), None).unwrap();
            push(&mut s, r);
        }
        let sweep = ClassSweep { knob: Knob::Seed, values: vec![1.0, 2.0], steps: 50 };
        let r = s.checked(Record::Experimented { sweep: Some(sweep.clone()) }).unwrap();
        push(&mut s, r);
        assert!(s.checked(Record::Predicted { id: 9, diverges: vec![true, false] }).is_err(), "no such student");
        let r = s.checked(Record::Predicted { id: 1, diverges: vec![true, false] }).unwrap();
        push(&mut s, r);
        for (id, points) in [
            (1, vec![(1, Some(5.0)), (10, Some(4.0))]),
            (3, vec![(1, Some(5.0)), (10, Some(6.0))]),
            (1, vec![(20, Some(3.5))]),
            // Student 2 trained, then reloaded and trained again.
            (2, vec![(1, Some(5.0)), (30, Some(3.0))]),
            (2, vec![(1, Some(5.1))]),
        ] {
            let r = s.checked(Record::Reported { id, points }).unwrap();
            push(&mut s, r);
        }
        let replayed = Session::replay(&log).unwrap();
        assert_eq!(replayed.experiment, s.experiment);
        assert_eq!(replayed.dashboard(), s.dashboard());
        let board = s.dashboard().experiment.unwrap();
        // Students 1 and 3 have seed 1; 2 has seed 2, whose curve restarted.
        assert_eq!((board.rows[0].students, board.rows[0].reporting, board.rows[0].diverged), (2, 2, 1));
        assert_eq!(board.rows[0].median_loss, Some(4.75));
        assert_eq!(s.experiment.as_ref().unwrap().curves[&2], vec![(1, Some(5.1))]);
        assert_eq!(s.assignment(2).unwrap().reported_to, Some(1));
        assert_eq!(s.assignment(1).unwrap().predicted, Some(vec![true, false]));
        // A curve starts again a bounded number of times.
        for k in 1..crate::class::experiment::MAX_RESTARTS {
            let r = s.checked(Record::Reported { id: 2, points: vec![(1, Some(5.0))] }).unwrap();
            s.apply(&r);
            assert_eq!(s.experiment.as_ref().unwrap().restarts[&2], k + 1);
        }
        assert!(s.checked(Record::Reported { id: 2, points: vec![(1, Some(5.0))] }).is_err());
        assert!(s.checked(Record::Reported { id: 2, points: vec![(2, Some(5.0))] }).is_ok(), "it goes on");
        // A new sweep: round 2, nothing carried over; ended: none.
        let r = s.checked(Record::Experimented { sweep: Some(sweep) }).unwrap();
        s.apply(&r);
        let e = s.experiment.as_ref().unwrap();
        assert_eq!((e.round, e.predictions.len(), e.curves.len()), (2, 0, 0));
        s.apply(&Record::Experimented { sweep: None });
        assert!(s.assignment(1).is_none() && s.dashboard().experiment.is_none());
    }

    #[test]
    fn answers_are_refused_when_they_do_not_fit() {
        let mut s = class();
        let r = s.join("k".into(), None).unwrap();
        s.apply(&r);
        let q = question_step(&s);
        if q > 0 {
            assert!(s.answer(1, q, 0).is_err(), "past the teacher's step while paced");
        }
        s.apply(&s.goto(q).unwrap());
        assert!(s.answer(9, q, 0).is_err(), "no such student");
        assert!(s.answer(1, q, 99).is_err(), "no such choice");
        s.apply(&s.answer(1, q, 0).unwrap());
        assert!(s.answer(1, q, 1).is_err(), "answered already");
        assert!(s.rejoin(&Seat { id: 1, key: "x".into() }).is_err());
        assert_eq!(s.rejoin(&Seat { id: 1, key: "k".into() }), Ok(1));
        assert!(s.goto(999).is_err());
    }
}
