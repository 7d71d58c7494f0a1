//! The tour's camera: a pose fitted to each beat's tensors (for any model
//! size), and the camera's place as a pure function of the timeline, so
//! scrubbing and stepping back land exactly where playing does. Each beat
//! is a fixed rhythm: a short eased move (a cut with reduced motion), a
//! still camera for the rest of the beat.

use super::layout::WalkLayout;
use bevy::prelude::*;

/// The camera's vertical field of view.
pub const FOV_Y: f32 = 0.5;
/// The share of a beat the camera moves in (the rest it holds still).
pub const MOVE_SHARE: f32 = 0.3;

/// Where the camera is and where it looks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pose {
    pub target: Vec3,
    pub distance: f32,
    pub rotation: Quat,
}

impl Pose {
    pub fn transform(&self) -> Transform {
        let back = self.rotation * Vec3::Z;
        Transform {
            translation: self.target + back * self.distance,
            rotation: self.rotation,
            scale: Vec3::ONE,
        }
    }

    /// Eased from `self` to `to` by `f` in 0..=1: the target glides, the
    /// distance moves in log space (zooms read as even), the rotation
    /// slerps.
    pub fn lerp(&self, to: &Pose, f: f32) -> Pose {
        Pose {
            target: self.target.lerp(to.target, f),
            distance: (self.distance.ln() + (to.distance.ln() - self.distance.ln()) * f).exp(),
            rotation: self.rotation.slerp(to.rotation, f),
        }
    }
}

/// The free part of the view the tensors must fit in, in pixels: the
/// viewport, less the toolbar above and the narration below.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FreeView {
    pub width: f32,
    pub height: f32,
    pub top: f32,
    pub bottom: f32,
}

/// The view's turn: a little from the right (so the heads' deck shows its
/// depth) and a little from above.
pub fn rotation(overview: bool) -> Quat {
    if overview {
        Quat::from_euler(EulerRot::YXZ, 0.12, -0.08, 0.0)
    } else {
        Quat::from_euler(EulerRot::YXZ, 0.32, -0.14, 0.0)
    }
}

/// The pose that shows the box `lo..hi` whole in the frame's free part.
pub fn fit(lo: Vec3, hi: Vec3, frame: FreeView, rotation: Quat) -> Pose {
    let free_h = (frame.height - frame.top - frame.bottom).max(frame.height * 0.3);
    let tan_y = (FOV_Y * 0.5).tan();
    let tan_x = tan_y * frame.width / frame.height;
    // The share of the view's height and width the box may take.
    let (share_y, share_x) = (free_h / frame.height * 0.92, 0.94);
    let centre = (lo + hi) * 0.5;
    let inverse = rotation.inverse();
    let mut distance: f32 = 1.0;
    for corner in 0..8 {
        let p = Vec3::new(
            if corner & 1 == 0 { lo.x } else { hi.x },
            if corner & 2 == 0 { lo.y } else { hi.y },
            if corner & 4 == 0 { lo.z } else { hi.z },
        );
        // In the camera's axes, from the centre (z towards the camera).
        let v = inverse * (p - centre);
        distance = distance
            .max(v.x.abs() / (tan_x * share_x) + v.z)
            .max(v.y.abs() / (tan_y * share_y) + v.z);
    }
    // The free part's centre is below the toolbar and above the
    // narration: aim so the box's centre lands there.
    let world_per_px = 2.0 * distance * tan_y / frame.height;
    let shift_px = (frame.bottom - frame.top) * 0.5;
    let up = rotation * Vec3::Y;
    Pose {
        target: centre - up * shift_px * world_per_px,
        distance,
        rotation,
    }
}

/// The pose of each beat.
pub fn poses(walk: &WalkLayout, frame: FreeView) -> Vec<Pose> {
    walk.beats
        .iter()
        .enumerate()
        .map(|(k, beat)| {
            let (lo, hi) = walk.bounds_of(&beat.slabs);
            // The overview leaves room above for two rows of titles.
            let frame = if k == 0 {
                FreeView {
                    top: frame.top + 30.0,
                    ..frame
                }
            } else {
                frame
            };
            fit(lo, hi, frame, rotation(k == 0))
        })
        .collect()
}

/// The camera at timeline position `t` (beat `k` spans `k..k + 1`): it
/// moves from beat k − 1's pose to beat k's in the beat's first
/// [`MOVE_SHARE`], eased, then holds; with reduced motion it cuts.
pub fn pose_at(poses: &[Pose], t: f32, reduced_motion: bool) -> Option<Pose> {
    let last = poses.len().checked_sub(1)?;
    let t = t.clamp(0.0, last as f32 + 0.999);
    let k = (t.floor() as usize).min(last);
    if k == 0 || reduced_motion {
        return Some(poses[k]);
    }
    let f = ((t - k as f32) / MOVE_SHARE).clamp(0.0, 1.0);
    // The ends exactly (the log-space zoom does not round-trip).
    if f >= 1.0 - 1e-4 {
        return Some(poses[k]);
    }
    if f <= 0.0 {
        return Some(poses[k - 1]);
    }
    let eased = f * f * (3.0 - 2.0 * f);
    Some(poses[k - 1].lerp(&poses[k], eased))
}

/// World units per pixel at `distance` in front of the camera.
pub fn world_per_px(distance: f32, viewport_height: f32) -> f32 {
    2.0 * distance * (FOV_Y * 0.5).tan() / viewport_height.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> FreeView {
        FreeView {
            width: 1280.0,
            height: 720.0,
            top: 40.0,
            bottom: 150.0,
        }
    }

    /// Every corner of the fitted box projects inside the free part of the
    /// view.
    #[test]
    fn a_fitted_box_is_inside_the_free_view() {
        let (lo, hi) = (Vec3::new(-30.0, -500.0, -40.0), Vec3::new(90.0, 0.0, 0.0));
        let f = frame();
        let pose = fit(lo, hi, f, rotation(false));
        let camera = pose.transform();
        let tan_y = (FOV_Y * 0.5).tan();
        for corner in 0..8 {
            let p = Vec3::new(
                if corner & 1 == 0 { lo.x } else { hi.x },
                if corner & 2 == 0 { lo.y } else { hi.y },
                if corner & 4 == 0 { lo.z } else { hi.z },
            );
            let v = camera.rotation.inverse() * (p - camera.translation);
            let ndc_y = v.y / (-v.z * tan_y);
            let ndc_x = v.x / (-v.z * tan_y * f.width / f.height);
            let px_y = (1.0 - ndc_y) * 0.5 * f.height;
            assert!(ndc_x.abs() <= 1.0, "corner {corner} x {ndc_x}");
            assert!(px_y >= f.top - 1.0 && px_y <= f.height - f.bottom + 1.0, "corner {corner} y {px_y}");
        }
    }

    /// The pose is a function of the timeline: the start and end of a
    /// beat's move are the two beats' poses, and a cut is at once.
    #[test]
    fn the_pose_follows_the_timeline() {
        let a = fit(Vec3::ZERO, Vec3::splat(10.0), frame(), rotation(true));
        let b = fit(Vec3::new(100.0, -50.0, 0.0), Vec3::new(400.0, 0.0, 0.0), frame(), rotation(false));
        let poses = [a, b];
        assert_eq!(pose_at(&poses, 0.5, false), Some(a));
        assert_eq!(pose_at(&poses, 1.0, false), Some(a));
        assert_eq!(pose_at(&poses, 1.0 + MOVE_SHARE, false), Some(b));
        assert_eq!(pose_at(&poses, 1.01, true), Some(b));
        let mid = pose_at(&poses, 1.0 + MOVE_SHARE * 0.5, false).unwrap();
        assert!(mid.target.distance(a.target) > 1.0 && mid.target.distance(b.target) > 1.0);
    }
}
