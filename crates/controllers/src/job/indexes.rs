//! Completion indexes of Indexed Jobs: the interval-list type behind
//! `status.completedIndexes` / `status.failedIndexes` /
//! `successPolicy.rules[].succeededIndexes`, and the index annotations of pods.
//!
//! Mirrors upstream `pkg/controller/job/indexed_job_utils.go`
//! (`orderedIntervals`, `parseIndexesFromString`, `getCompletionIndex`,
//! `parseIndexFailureCountAnnotation`) and the validation parser
//! `validateIndexesFormat` of `pkg/apis/batch/validation`.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;

/// Annotation (and, with PodIndexLabel GA, label) carrying a pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Annotation counting the counted failures of previous pods of the same index (BLPI).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// Annotation counting the ignored (Ignore rule) failures of previous pods of the index.
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

/// An ordered list of disjoint, non-adjacent, inclusive `(first, last)` index intervals.
///
/// Invariant: for consecutive intervals `a`, `b`: `a.1 + 1 < b.0`, and `first <= last`
/// within each interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Intervals(Vec<(i32, i32)>);

impl Intervals {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Controller-side parsing (upstream `parseIndexesFromString`): corrupted
    /// fragments are skipped, parsing stops at the first fragment starting at an
    /// index `>= completions`, and interval ends are clamped to `completions - 1`.
    ///
    /// Unlike upstream, the result is normalised (sorted, merged); this only
    /// differs from upstream for out-of-order input that validation rejects anyway.
    pub fn parse(s: &str, completions: i32) -> Intervals {
        if s.is_empty() {
            return Intervals::new();
        }
        let completions = i64::from(completions);
        let mut raw: Vec<(i32, i32)> = Vec::new();
        for fragment in s.split(',') {
            let mut limits = fragment.split('-');
            let Some(first) = limits.next().and_then(parse_go_int) else {
                continue;
            };
            if first >= completions {
                break;
            }
            let last = match limits.next() {
                Some(l) => match parse_go_int(l) {
                    Some(l) => l.min(completions - 1),
                    None => continue,
                },
                None => first,
            };
            // `first < completions <= i32::MAX` here; negative values cannot be
            // produced because '-' is the separator.
            if first < 0 || last < first {
                continue;
            }
            raw.push((first as i32, last as i32));
        }
        Self::normalize(raw)
    }

    /// Validation-side parsing (upstream `validateIndexesFormat`), used for
    /// `successPolicy.rules[].succeededIndexes` (and status index lists). The
    /// error is the upstream text *without* the `error parsing succeededIndexes: `
    /// prefix that validation adds. The number of indexes is `total()`.
    pub fn parse_strict(s: &str, completions: i32) -> Result<Intervals, String> {
        if s.is_empty() {
            return Ok(Intervals::new());
        }
        let mut out = Vec::new();
        let mut last_index: Option<i64> = None;
        for fragment in s.split(',') {
            let (x, y) = parse_index_interval(fragment, i64::from(completions))?;
            if let Some(prev) = last_index
                && prev >= x
            {
                return Err(format!("non-increasing order, previous: {prev}, current: {x}"));
            }
            last_index = Some(y);
            out.push((x as i32, y as i32));
        }
        Ok(Self::normalize(out))
    }

    /// The set of the given indexes (any order, duplicates allowed).
    pub fn from_indexes(indexes: impl IntoIterator<Item = i32>) -> Intervals {
        Self::normalize(indexes.into_iter().map(|i| (i, i)).collect())
    }

    /// Build from arbitrary inclusive intervals (empty/reversed ones are dropped).
    pub fn from_intervals(intervals: impl IntoIterator<Item = (i32, i32)>) -> Intervals {
        Self::normalize(intervals.into_iter().collect())
    }

    fn normalize(mut raw: Vec<(i32, i32)>) -> Intervals {
        raw.retain(|(a, b)| a <= b);
        raw.sort_unstable();
        let mut out: Vec<(i32, i32)> = Vec::with_capacity(raw.len());
        for (a, b) in raw {
            match out.last_mut() {
                Some(last) if i64::from(a) <= i64::from(last.1) + 1 => {
                    last.1 = last.1.max(b);
                }
                _ => out.push((a, b)),
            }
        }
        Intervals(out)
    }

    /// The intervals, ordered.
    pub fn intervals(&self) -> &[(i32, i32)] {
        &self.0
    }

    /// Whether no index is contained.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `ix` is contained (binary search).
    pub fn contains(&self, ix: i32) -> bool {
        let pos = self.0.partition_point(|&(_, last)| last < ix);
        pos < self.0.len() && self.0[pos].0 <= ix
    }

    /// Number of indexes contained (saturating at `i32::MAX`).
    pub fn total(&self) -> i32 {
        let t: i64 = self.0.iter().map(|&(a, b)| i64::from(b) - i64::from(a) + 1).sum();
        t.min(i64::from(i32::MAX)) as i32
    }

    /// Set union.
    pub fn union(&self, other: &Intervals) -> Intervals {
        Self::normalize(self.0.iter().chain(other.0.iter()).copied().collect())
    }

    /// Union with individual indexes (upstream `withOrderedIndexes`).
    pub fn with_indexes(&self, indexes: impl IntoIterator<Item = i32>) -> Intervals {
        self.union(&Intervals::from_indexes(indexes))
    }

    /// Number of indexes in both sets.
    pub fn intersection_total(&self, other: &Intervals) -> i32 {
        let (mut i, mut j, mut n) = (0usize, 0usize, 0i64);
        while i < self.0.len() && j < other.0.len() {
            let (a1, b1) = self.0[i];
            let (a2, b2) = other.0[j];
            let overlap = i64::from(b1.min(b2)) - i64::from(a1.max(a2)) + 1;
            if overlap > 0 {
                n += overlap;
            }
            if b2 < b1 {
                j += 1;
            } else {
                i += 1;
            }
        }
        n.min(i64::from(i32::MAX)) as i32
    }

    /// Whether every index of `self` is in `other`.
    pub fn is_subset_of(&self, other: &Intervals) -> bool {
        self.intersection_total(other) == self.total()
    }

    /// Indexes `< completions` only (elastic scale-down).
    pub fn truncated(&self, completions: i32) -> Intervals {
        Intervals(
            self.0
                .iter()
                .filter(|&&(a, _)| a < completions)
                .map(|&(a, b)| (a, b.min(completions.saturating_sub(1))))
                .collect(),
        )
    }

    /// All contained indexes, ascending.
    pub fn iter(&self) -> impl Iterator<Item = i32> + '_ {
        self.0.iter().flat_map(|&(a, b)| a..=b)
    }

    /// Indexes in `0..completions` that are NOT contained, ascending (lazy).
    pub fn missing_below(&self, completions: i32) -> impl Iterator<Item = i32> + '_ {
        let mut gaps: Vec<(i32, i32)> = Vec::new();
        let mut next = 0i32;
        for &(a, b) in &self.0 {
            if next >= completions {
                break;
            }
            if a > next {
                gaps.push((next, (a - 1).min(completions - 1)));
            }
            next = next.max(b.saturating_add(1));
        }
        if next < completions {
            gaps.push((next, completions - 1));
        }
        gaps.into_iter().flat_map(|(a, b)| a..=b)
    }

    /// The lowest `count` indexes in `0..completions` that are not contained
    /// (upstream `firstPendingIndexes`, given the union of non-pending indexes).
    pub fn first_missing_up_to(&self, completions: i32, count: usize) -> Vec<i32> {
        self.missing_below(completions).take(count).collect()
    }
}

impl fmt::Display for Intervals {
    /// Upstream `orderedIntervals.String()`: `0,3-7`; a pair is written `1,2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(a, b)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}")?;
            if b > a {
                if b == a + 1 {
                    write!(f, ",{b}")?;
                } else {
                    write!(f, "-{b}")?;
                }
            }
        }
        Ok(())
    }
}

/// Go `strconv.Atoi` on a 64-bit platform (optional sign, decimal digits).
fn parse_go_int(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

/// Go `%q` quoting (`strconv.Quote`) for error messages.
pub(crate) use jobset_api::field::quote as go_quote;

/// Upstream validation `parseIndexInterval`.
fn parse_index_interval(fragment: &str, completions: i64) -> Result<(i64, i64), String> {
    let limits: Vec<&str> = fragment.split('-').collect();
    if limits.len() > 2 {
        return Err(format!(
            "the fragment {} violates the requirement that an index interval can have at most two parts separated by '-'",
            go_quote(fragment)
        ));
    }
    let parse =
        |s: &str| parse_go_int(s).ok_or_else(|| format!("cannot convert string to integer for index: {}", go_quote(s)));
    let x = parse(limits[0])?;
    if x >= completions {
        return Err(format!("too large index: {}", go_quote(limits[0])));
    }
    if limits.len() > 1 {
        let y = parse(limits[1])?;
        if y >= completions {
            return Err(format!("too large index: {}", go_quote(limits[1])));
        }
        if x >= y {
            return Err(format!("non-increasing order, previous: {x}, current: {y}"));
        }
        return Ok((x, y));
    }
    Ok((x, x))
}

/// A non-negative int32 written in decimal (Go `Atoi` + range check).
fn parse_non_negative_i32(s: &str) -> Option<i32> {
    parse_go_int(s).filter(|v| (0..=i64::from(i32::MAX)).contains(v)).map(|v| v as i32)
}

/// The completion index of a pod: the `batch.kubernetes.io/job-completion-index`
/// annotation if present, else the label of the same name. A present but
/// unparsable or negative value yields `None` (upstream `unknownCompletionIndex`).
pub fn pod_index(pod: &Pod) -> Option<i32> {
    let meta = &pod.metadata;
    let value = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(COMPLETION_INDEX))
        .or_else(|| meta.labels.as_ref().and_then(|l| l.get(COMPLETION_INDEX)))?;
    parse_non_negative_i32(value)
}

/// `(failure count, ignored failure count)` from the pod's
/// `job-index-failure-count` / `job-index-ignored-failure-count` annotations.
/// Missing, unparsable, negative or > int32 values count as 0.
pub fn index_failure_counts(pod: &Pod) -> (i32, i32) {
    let get = |key: &str| {
        pod.metadata.annotations.as_ref().and_then(|a| a.get(key)).and_then(|v| parse_non_negative_i32(v)).unwrap_or(0)
    };
    (get(INDEX_FAILURE_COUNT), get(INDEX_IGNORED_FAILURE_COUNT))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Annotation / label pairs.
    type Kv = &'static [(&'static str, &'static str)];
    /// Inclusive intervals.
    type Ivs = &'static [(i32, i32)];

    fn pod(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        if !annotations.is_empty() {
            p.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        }
        if !labels.is_empty() {
            p.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        }
        p
    }

    #[test]
    fn parse_controller_format() {
        // (input, completions, expected intervals, expected string)
        let cases: &[(&str, i32, Ivs, &str)] = &[
            ("", 10, &[], ""),
            ("0", 10, &[(0, 0)], "0"),
            ("0,3-7", 10, &[(0, 0), (3, 7)], "0,3-7"),
            ("1,2", 10, &[(1, 2)], "1,2"),
            ("1-2", 10, &[(1, 2)], "1,2"),
            ("1,2,3", 10, &[(1, 3)], "1-3"),
            ("0,1-3,5,6", 10, &[(0, 3), (5, 6)], "0-3,5,6"),
            // stops at indexes >= completions, clamps interval ends
            ("1,3-7,9", 5, &[(1, 1), (3, 4)], "1,3,4"),
            ("5,6", 5, &[], ""),
            ("2-100", 4, &[(2, 3)], "2,3"),
            // corrupted fragments are ignored
            ("0,a,2-b,4", 10, &[(0, 0), (4, 4)], "0,4"),
            ("-1,3", 10, &[(3, 3)], "3"),
            ("1,,3", 10, &[(1, 1), (3, 3)], "1,3"),
            ("1-2-3,7", 10, &[(1, 2), (7, 7)], "1,2,7"),
            ("9999999999999999999999,3", 10, &[(3, 3)], "3"),
            // reversed interval dropped, out-of-order normalised
            ("5-3,8", 10, &[(8, 8)], "8"),
            ("6,1", 10, &[(1, 1), (6, 6)], "1,6"),
            ("0", 0, &[], ""),
        ];
        for (input, completions, want, want_str) in cases {
            let got = Intervals::parse(input, *completions);
            assert_eq!(got.intervals(), *want, "parse({input:?}, {completions})");
            assert_eq!(got.to_string(), *want_str, "display of {input:?}");
        }
    }

    #[test]
    fn parse_strict_validation_messages() {
        let cases: &[(&str, i32, Result<i32, &str>)] = &[
            ("", 5, Ok(0)),
            ("0,2-4", 5, Ok(4)),
            ("0,1", 5, Ok(2)),
            (
                "1-2-3",
                10,
                Err(
                    "the fragment \"1-2-3\" violates the requirement that an index interval can have at most two parts separated by '-'",
                ),
            ),
            ("a", 10, Err("cannot convert string to integer for index: \"a\"")),
            ("1-", 10, Err("cannot convert string to integer for index: \"\"")),
            ("1,,2", 10, Err("cannot convert string to integer for index: \"\"")),
            ("10", 10, Err("too large index: \"10\"")),
            ("1-10", 10, Err("too large index: \"10\"")),
            ("3-3", 10, Err("non-increasing order, previous: 3, current: 3")),
            ("5-2", 10, Err("non-increasing order, previous: 5, current: 2")),
            ("1-3,3", 10, Err("non-increasing order, previous: 3, current: 3")),
            ("4,2", 10, Err("non-increasing order, previous: 4, current: 2")),
        ];
        for (input, completions, want) in cases {
            let got = Intervals::parse_strict(input, *completions).map(|i| i.total());
            assert_eq!(got, want.map_err(str::to_string), "parse_strict({input:?})");
        }
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }

    #[test]
    fn from_indexes_display_and_queries() {
        let s = Intervals::from_indexes([7, 0, 3, 4, 5, 6, 3, 9, 10]);
        assert_eq!(s.to_string(), "0,3-7,9,10");
        assert_eq!(s.total(), 8);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 3, 4, 5, 6, 7, 9, 10]);
        for (ix, want) in
            [(0, true), (1, false), (3, true), (7, true), (8, false), (10, true), (11, false), (-1, false)]
        {
            assert_eq!(s.contains(ix), want, "contains({ix})");
        }
        assert!(Intervals::from_indexes([]).is_empty());
        assert_eq!(Intervals::from_indexes([]).to_string(), "");
    }

    #[test]
    fn union_and_with_indexes_merge_adjacent() {
        let cases: &[(&str, &str, &str)] = &[
            ("", "", ""),
            ("0,3-7", "", "0,3-7"),
            ("0,3-7", "1,2", "0-7"),
            ("0,5", "2", "0,2,5"),
            ("1-3", "2-6", "1-6"),
            ("4", "5", "4,5"),
            ("0-9", "3", "0-9"),
        ];
        for (a, b, want) in cases {
            let a = Intervals::parse(a, 100);
            let b = Intervals::parse(b, 100);
            assert_eq!(a.union(&b).to_string(), *want);
            assert_eq!(b.union(&a).to_string(), *want);
        }
        let s = Intervals::parse("0,3-7", 10).with_indexes([1, 9, 8]);
        assert_eq!(s.to_string(), "0,1,3-9");
    }

    #[test]
    fn intersection_subset_and_truncation() {
        let a = Intervals::parse("0-4,8-9", 10);
        let b = Intervals::parse("3-8", 10);
        assert_eq!(a.intersection_total(&b), 3);
        assert_eq!(b.intersection_total(&a), 3);
        assert!(Intervals::parse("3,4", 10).is_subset_of(&a));
        assert!(!b.is_subset_of(&a));
        assert_eq!(a.truncated(4).to_string(), "0-3");
        assert_eq!(a.truncated(9).to_string(), "0-4,8");
        assert_eq!(a.truncated(0).to_string(), "");
    }

    #[test]
    fn lowest_missing_indexes() {
        let cases: &[(&str, i32, usize, &[i32])] = &[
            ("", 3, 5, &[0, 1, 2]),
            ("", 5, 2, &[0, 1]),
            ("0,3-7", 10, 10, &[1, 2, 8, 9]),
            ("0,3-7", 10, 3, &[1, 2, 8]),
            ("0-9", 10, 3, &[]),
            ("1", 3, 0, &[]),
            ("5-20", 4, 10, &[0, 1, 2, 3]),
            ("", 0, 3, &[]),
        ];
        for (set, completions, count, want) in cases {
            let s = Intervals::parse(set, 100);
            assert_eq!(s.first_missing_up_to(*completions, *count), *want, "missing of {set:?} below {completions}");
        }
    }

    #[test]
    fn pod_index_annotation_then_label() {
        let cases: &[(Kv, Kv, Option<i32>)] = &[
            (&[], &[], None),
            (&[(COMPLETION_INDEX, "3")], &[], Some(3)),
            (&[], &[(COMPLETION_INDEX, "4")], Some(4)),
            (&[(COMPLETION_INDEX, "3")], &[(COMPLETION_INDEX, "4")], Some(3)),
            (&[(COMPLETION_INDEX, "x")], &[(COMPLETION_INDEX, "4")], None),
            (&[(COMPLETION_INDEX, "-1")], &[], None),
            (&[(COMPLETION_INDEX, "")], &[], None),
            (&[(COMPLETION_INDEX, "99999999999")], &[], None),
        ];
        for (ann, lab, want) in cases {
            assert_eq!(pod_index(&pod(ann, lab)), *want, "{ann:?} {lab:?}");
        }
    }

    #[test]
    fn index_failure_counts_from_annotations() {
        let cases: &[(Kv, (i32, i32))] = &[
            (&[], (0, 0)),
            (&[(INDEX_FAILURE_COUNT, "2")], (2, 0)),
            (&[(INDEX_FAILURE_COUNT, "2"), (INDEX_IGNORED_FAILURE_COUNT, "5")], (2, 5)),
            (&[(INDEX_FAILURE_COUNT, "bad"), (INDEX_IGNORED_FAILURE_COUNT, "-3")], (0, 0)),
            (&[(INDEX_FAILURE_COUNT, "2147483648")], (0, 0)),
        ];
        for (ann, want) in cases {
            assert_eq!(index_failure_counts(&pod(ann, &[])), *want, "{ann:?}");
        }
    }
}
