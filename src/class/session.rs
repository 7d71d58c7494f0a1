//! One class as a state machine. Every change is a [`Record`]: the server
//! checks a page's request against the session ([`Session::join`],
//! [`Session::answer`], …, which say why they refuse), writes the record to
//! the log and applies it ([`Session::apply`]). Replaying a log's records
//! ([`Session::replay`]) rebuilds the same class, so a restarted server
//! resumes where it stopped. What is not recorded is what a page says
//! again when it reconnects: where a student is, who is online.

use super::protocol::{
    ClassState, Dashboard, MAX_PROMPT_BYTES, Reveal, Seat, SharedView, StudentId, StudentRow, Tally,
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
        }
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
        }
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
