//! Kubernetes label and field selectors, as `k8s.io/apimachinery`:
//!
//! * [`LabelSelector::parse`] is `labels.Parse` (the `?labelSelector=` syntax),
//! * [`from_label_selector_json`] is `metav1.LabelSelectorAsSelector` for the structured
//!   `{"matchLabels": .., "matchExpressions": [..]}` form, validated as
//!   `metav1validation.ValidateLabelSelector` so errors name the offending field,
//! * [`FieldSelector::parse`] is `fields.ParseSelector` (the `?fieldSelector=` syntax).
//!
//! Error messages follow the upstream wording, including its field paths (a key error while
//! parsing the string syntax is reported at the path `<nil>`, exactly as upstream does).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::names;

/// A selector that could not be parsed or is invalid; the message is the upstream wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// A label requirement operator (`selection.Operator`); `==` parses as [`Operator::Equals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    Equals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One label requirement: `key operator values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

/// A parsed label selector: the AND of its requirements (sorted by key, as upstream).
/// No requirements matches everything; [`LabelSelector::nothing`] matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

// ---------------------------------------------------------------------------------------------
// Go-style rendering of field errors.

/// Go's `%q` for a string (shared with the rest of the admission messages).
use jobset_api::field::quote as go_quote;

/// Go's `%#v` for a `[]string`.
fn go_string_slice(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// `field.Invalid(path, value, detail).Error()`, with `value` already rendered.
fn invalid(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {value}: {detail}")
}

/// `utilerrors.NewAggregate(errs).Error()` (after `ErrorList.ToAggregate` de-duplication).
fn aggregate(errs: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 { seen.remove(0) } else { format!("[{}]", seen.join(", ")) }
}

/// `validateLabelKey`.
fn validate_label_key(key: &str, path: &str) -> Option<String> {
    let errs = names::qualified_name(key);
    (!errs.is_empty()).then(|| invalid(path, &go_quote(key), &errs.join("; ")))
}

/// `validateLabelValue` (the path gets the key as a subscript).
fn validate_label_value(key: &str, value: &str, path: &str) -> Option<String> {
    let errs = names::label_value(value);
    (!errs.is_empty()).then(|| invalid(&format!("{path}[{key}]"), &go_quote(value), &errs.join("; ")))
}

fn child(path: Option<&str>, name: &str) -> String {
    match path {
        Some(p) if !p.is_empty() => format!("{p}.{name}"),
        _ => name.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Requirements.

impl Requirement {
    /// `labels.NewRequirement`: validates the key, the value count for the operator, integer
    /// values for `Gt`/`Lt`, and every value. Values are kept in the given order.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Requirement, SelectorError> {
        new_requirement(key, operator, values, None).map_err(SelectorError)
    }

    /// Whether labels (looked up through `get`) satisfy this requirement. As upstream, `!=` and
    /// `notin` match when the key is absent; `Gt`/`Lt` need the label to be an integer.
    pub fn matches_fn<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let has_value = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Equals | Operator::In => get(&self.key).is_some_and(has_value),
            Operator::NotEquals | Operator::NotIn => get(&self.key).is_none_or(|v| !has_value(v)),
            Operator::Exists => get(&self.key).is_some(),
            Operator::DoesNotExist => get(&self.key).is_none(),
            Operator::Gt | Operator::Lt => {
                let Some(Ok(actual)) = get(&self.key).map(str::parse::<i64>) else {
                    return false;
                };
                let [wanted] = self.values.as_slice() else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::Gt { actual > wanted } else { actual < wanted }
            }
        }
    }
}

fn new_requirement(
    key: &str,
    operator: Operator,
    values: Vec<String>,
    path: Option<&str>,
) -> Result<Requirement, String> {
    let mut errs = Vec::new();
    if let Some(e) = validate_label_key(key, &child(path, "key")) {
        errs.push(e);
    }
    let values_path = child(path, "values");
    match operator {
        Operator::In | Operator::NotIn => {
            if values.is_empty() {
                errs.push(invalid(
                    &values_path,
                    &go_string_slice(&values),
                    "for 'in', 'notin' operators, values set can't be empty",
                ));
            }
        }
        Operator::Equals | Operator::NotEquals => {
            if values.len() != 1 {
                errs.push(invalid(
                    &values_path,
                    &go_string_slice(&values),
                    "exact-match compatibility requires one single value",
                ));
            }
        }
        Operator::Exists | Operator::DoesNotExist => {
            if !values.is_empty() {
                errs.push(invalid(
                    &values_path,
                    &go_string_slice(&values),
                    "values set must be empty for exists and does not exist",
                ));
            }
        }
        Operator::Gt | Operator::Lt => {
            if values.len() != 1 {
                errs.push(invalid(
                    &values_path,
                    &go_string_slice(&values),
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if v.parse::<i64>().is_err() {
                    errs.push(invalid(
                        &format!("{values_path}[{i}]"),
                        &go_quote(v),
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        if let Some(e) = validate_label_value(key, v, &format!("{values_path}[{i}]")) {
            errs.push(e);
        }
    }
    if errs.is_empty() { Ok(Requirement { key: key.to_string(), operator, values }) } else { Err(aggregate(errs)) }
}

impl fmt::Display for Requirement {
    /// `Requirement.String()`: `!k`, `k`, `k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k>1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::NotEquals => "!=",
            Operator::In => " in (",
            Operator::NotIn => " notin (",
            Operator::Gt => ">",
            Operator::Lt => "<",
        };
        f.write_str(op)?;
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        f.write_str(&values.join(","))?;
        if matches!(self.operator, Operator::In | Operator::NotIn) {
            f.write_str(")")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The label selector string syntax: a port of the apimachinery lexer and parser.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    /// The next byte, or 0 at the end of the input (a NUL byte reads the same, as upstream).
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos -= 1;
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special_symbol(ch) { self.scan_special_symbol() } else { self.scan_id_or_keyword() }
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
        }
        (keyword(&buffer).unwrap_or(Token::Identifier), text(&buffer))
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        let mut last: Option<(Token, String)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
            if let Some(tok) = keyword(&buffer) {
                last = Some((tok, text(&buffer)));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        last.unwrap_or_else(|| (Token::Error, format!("error expected: keyword found '{}'", text(&buffer))))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

/// A sorted, de-duplicated value set (`sets.String.List()`).
fn set_list(mut values: Vec<String>) -> Vec<String> {
    values.sort();
    values.dedup();
    values
}

impl Parser {
    fn new(s: &str) -> Parser {
        let mut lexer = Lexer { s: s.as_bytes(), pos: 0 };
        let mut items = Vec::new();
        loop {
            let (tok, lit) = lexer.lex();
            items.push((tok, lit));
            if tok == Token::EndOfString {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, index: usize, context: Context) -> (Token, String) {
        let (tok, lit) = self.items.get(index).cloned().unwrap_or((Token::EndOfString, String::new()));
        match tok {
            Token::In | Token::NotIn if context == Context::Values => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.item(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        self.position += 1;
        self.item(self.position - 1, context)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!("found '{l2}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!("found '{lit}', expected: !, identifier, or 'end of string'"));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return new_requirement(&key, op, Vec::new(), None);
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(&key, operator, set_list(values), None)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut tok, mut literal) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, literal) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        // Upstream validates the key against a nil field path here.
        if let Some(e) = validate_label_key(&literal, "<nil>") {
            return Err(e);
        }
        let (t, _) = self.lookahead(Context::Values);
        if (t == Token::EndOfString || t == Token::Comma) && operator != Some(Operator::DoesNotExist) {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals | Token::DoubleEquals => Operator::Equals,
            Token::GreaterThan => Operator::Gt,
            Token::LessThan => Operator::Lt,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let s = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut s: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    s.push(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if s.is_empty() {
                        s.push(String::new()); // "(,"
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        s.push(String::new()); // ",)"
                        return Ok(s);
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        s.push(String::new()); // ",,"
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(vec![lit]);
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

impl LabelSelector {
    /// `labels.Parse`: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`,
    /// `k<1`, joined by commas (AND). Whitespace between tokens is ignored; the empty string
    /// selects everything.
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Parser::new(s).parse().map_err(SelectorError)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements, nothing: false })
    }

    /// A selector built from requirements (sorted by key, as `Selector.Add`).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> LabelSelector {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements, nothing: false }
    }

    /// `labels.Everything()`: matches every object.
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// `labels.Nothing()`: matches no object (what upstream uses for a nil selector pointer).
    pub fn nothing() -> LabelSelector {
        LabelSelector { requirements: Vec::new(), nothing: true }
    }

    /// The requirements, ANDed together.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector matches everything (no requirements).
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether labels looked up through `get` satisfy every requirement.
    pub fn matches_fn<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches_fn(&get))
    }

    /// Whether the label map satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_fn(|k| labels.get(k).map(String::as_str))
    }

    /// Whether a JSON `metadata.labels` object (string to string) satisfies every requirement;
    /// `None`, `null` or a non-object means no labels, and non-string values count as absent.
    pub fn matches_json(&self, labels: Option<&Value>) -> bool {
        self.matches_fn(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string form (`Selector.String()`), which [`LabelSelector::parse`] accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The structured metav1.LabelSelector form.

fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        other => other.to_string(),
    }
}

/// Converts a structured `metav1.LabelSelector` (`{"matchLabels": {..}, "matchExpressions":
/// [{"key", "operator", "values"}]}`) as `metav1.LabelSelectorAsSelector`, after validating it
/// as `ValidateLabelSelector` so that errors name the field (`matchLabels`,
/// `matchExpressions[0].values`, ...). `null` and `{}` match everything; a caller that wants
/// upstream's "absent selector matches nothing" uses [`LabelSelector::nothing`] itself.
pub fn from_label_selector_json(v: &Value) -> Result<LabelSelector, SelectorError> {
    let obj = match v {
        Value::Null => return Ok(LabelSelector::everything()),
        Value::Object(obj) => obj,
        other => {
            return Err(SelectorError(invalid("<nil>", &json_text(other), "a label selector must be an object")));
        }
    };
    let mut errs = Vec::new();
    let mut requirements = Vec::new();

    match obj.get("matchLabels").unwrap_or(&Value::Null) {
        Value::Null => {}
        Value::Object(labels) => {
            for (k, value) in labels {
                for msg in names::qualified_name(k) {
                    errs.push(invalid("matchLabels", &go_quote(k), &msg));
                }
                match value {
                    Value::String(s) => {
                        for msg in names::label_value(s) {
                            errs.push(invalid("matchLabels", &go_quote(s), &msg));
                        }
                        requirements.push(Requirement {
                            key: k.clone(),
                            operator: Operator::Equals,
                            values: vec![s.clone()],
                        });
                    }
                    other => errs.push(invalid(&format!("matchLabels[{k}]"), &json_text(other), "must be a string")),
                }
            }
        }
        other => errs.push(invalid("matchLabels", &json_text(other), "must be a map of string keys to string values")),
    }

    match obj.get("matchExpressions").unwrap_or(&Value::Null) {
        Value::Null => {}
        Value::Array(exprs) => {
            for (i, expr) in exprs.iter().enumerate() {
                let path = format!("matchExpressions[{i}]");
                if let Some(r) = expression(expr, &path, &mut errs) {
                    requirements.push(r);
                }
            }
        }
        other => {
            errs.push(invalid("matchExpressions", &json_text(other), "must be a list of label selector requirements"))
        }
    }

    if errs.is_empty() {
        Ok(LabelSelector::from_requirements(requirements))
    } else {
        Err(SelectorError(aggregate(errs)))
    }
}

/// One `matchExpressions` entry, validated as `ValidateLabelSelectorRequirement`.
fn expression(expr: &Value, path: &str, errs: &mut Vec<String>) -> Option<Requirement> {
    let Value::Object(expr) = expr else {
        errs.push(invalid(path, &json_text(expr), "must be a label selector requirement object"));
        return None;
    };
    let before = errs.len();
    let key = match expr.get("key").unwrap_or(&Value::Null) {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => {
            errs.push(invalid(&format!("{path}.key"), &json_text(other), "must be a string"));
            String::new()
        }
    };
    let operator_text = match expr.get("operator").unwrap_or(&Value::Null) {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut values = Vec::new();
    match expr.get("values").unwrap_or(&Value::Null) {
        Value::Null => {}
        Value::Array(items) => {
            for (j, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => values.push(s.clone()),
                    other => errs.push(invalid(&format!("{path}.values[{j}]"), &json_text(other), "must be a string")),
                }
            }
        }
        other => errs.push(invalid(&format!("{path}.values"), &json_text(other), "must be a list of strings")),
    }

    let operator = match operator_text.as_str() {
        "In" => Some(Operator::In),
        "NotIn" => Some(Operator::NotIn),
        "Exists" => Some(Operator::Exists),
        "DoesNotExist" => Some(Operator::DoesNotExist),
        _ => None,
    };
    match operator {
        Some(Operator::In | Operator::NotIn) if values.is_empty() => {
            errs.push(format!("{path}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"))
        }
        Some(Operator::Exists | Operator::DoesNotExist) if !values.is_empty() => errs.push(format!(
            "{path}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        )),
        Some(_) => {}
        None => {
            errs.push(format!("{path}.operator: {} is not a valid label selector operator", go_quote(&operator_text)))
        }
    }
    for msg in names::qualified_name(&key) {
        errs.push(invalid(&format!("{path}.key"), &go_quote(&key), &msg));
    }
    for (j, v) in values.iter().enumerate() {
        for msg in names::label_value(v) {
            errs.push(invalid(&format!("{path}.values[{j}]"), &go_quote(v), &msg));
        }
    }
    match operator {
        Some(operator) if errs.len() == before => Some(Requirement { key, operator, values }),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Field selectors.

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed field selector: the AND of `field=value` / `field!=value` terms. No terms matches
/// everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

/// `fields.splitTerms`: split on commas not preceded by a backslash escape.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `fields.splitTerm`: the first `!=`, `==` or `=` (checked in that order at each position).
fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    for (i, _) in term.char_indices() {
        let remaining = &term[i..];
        for op in ["!=", "==", "="] {
            if remaining.starts_with(op) {
                return Some((&term[..i], op, &term[i + op.len()..]));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are escapes; bare `,` and `=` are errors.
fn unescape_value(s: &str) -> Result<String, SelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                other => {
                    return Err(SelectorError(format!("invalid field selector: invalid escape sequence: \\{other}")));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream prints the rune with %v, i.e. as its number.
            ',' | '=' => {
                return Err(SelectorError(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            other => out.push(other),
        }
    }
    if in_slash {
        return Err(SelectorError("invalid field selector: invalid escape sequence: \\".to_string()));
    }
    Ok(out)
}

/// `fields.EscapeValue`.
fn escape_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=")
}

impl FieldSelector {
    /// `fields.ParseSelector`: `f=v`, `f==v`, `f!=v` joined by commas (AND). Values may escape
    /// `\,`, `\=` and `\\`. Nothing is trimmed, as upstream; the empty string selects everything.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(SelectorError(format!("invalid selector: '{s}'; can't understand '{part}'")));
            };
            let value = unescape_value(rhs)?;
            terms.push(FieldTerm { field: lhs.to_string(), value, equal: op != "!=" });
        }
        Ok(FieldSelector { terms })
    }

    /// True when the selector has no terms (matches everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether the object, whose fields are read through `get`, satisfies every term. A missing
    /// field compares as the empty string.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        // Borrowed values: every watch event is matched against every watcher's selector.
        self.terms.iter().all(|t| (get(&t.field).unwrap_or_default() == t.value) == t.equal)
    }

    /// The field names the selector uses, in order (may repeat), so a caller can reject
    /// unsupported fields.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// The first `field=value` term, if any: every object the selector matches has that value.
    pub fn first_exact(&self) -> Option<(&str, &str)> {
        self.terms.iter().find(|t| t.equal).map(|t| (t.field.as_str(), t.value.as_str()))
    }

    /// `RequiresExactMatch`: the value of the first `field=value` term for `field`, if any.
    pub fn exact_value(&self, field: &str) -> Option<&str> {
        self.terms.iter().find(|t| t.equal && t.field == field).map(|t| t.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    /// The canonical string form, which [`FieldSelector::parse`] accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if t.equal { "=" } else { "!=" };
            write!(f, "{}{op}{}", t.field, escape_value(&t.value))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// (selector, labels or fields, expected match)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn parse_err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(parsed) => panic!("{s:?} should not parse, got {parsed:?}"),
            Err(e) => e.to_string(),
        }
    }

    const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

    #[test]
    fn every_operator_matches_as_kubernetes() {
        let cases: &[Case] = &[
            ("app=web", &[("app", "web")], true),
            ("app=web", &[("app", "db")], false),
            ("app=web", &[], false),
            ("app==web", &[("app", "web")], true),
            ("app==web", &[("app", "db")], false),
            ("app!=web", &[("app", "db")], true),
            ("app!=web", &[("app", "web")], false),
            ("app!=web", &[], true),
            ("app in (web,db)", &[("app", "db")], true),
            ("app in (web,db)", &[("app", "cache")], false),
            ("app in (web,db)", &[], false),
            ("app notin (web,db)", &[("app", "cache")], true),
            ("app notin (web,db)", &[("app", "web")], false),
            ("app notin (web,db)", &[], true),
            ("app", &[("app", "")], true),
            ("app", &[("other", "x")], false),
            ("!app", &[("other", "x")], true),
            ("!app", &[("app", "x")], false),
            ("n>5", &[("n", "6")], true),
            ("n>5", &[("n", "5")], false),
            ("n>5", &[("n", "x")], false),
            ("n>5", &[], false),
            ("n<5", &[("n", "4")], true),
            ("n<5", &[("n", "5")], false),
            ("n<5", &[("n", "-10")], true),
            ("n<5", &[], false),
            ("a=1,b=2", &[("a", "1"), ("b", "2")], true),
            ("a=1,b=2", &[("a", "1"), ("b", "3")], false),
            ("a=1,!b", &[("a", "1")], true),
            ("a=,b", &[("a", ""), ("b", "x")], true),
            ("a=", &[("a", "x")], false),
            ("", &[("a", "x")], true),
            ("", &[], true),
        ];
        for (s, ls, want) in cases {
            assert_eq!(sel(s).matches(&labels(ls)), *want, "{s:?} against {ls:?}");
        }
    }

    #[test]
    fn requirements_are_parsed_into_key_operator_and_sorted_values() {
        let s = sel("z in (b,a,b), !y, x, w!=1, v==2, u>3, t<4, s notin (c)");
        let got: Vec<(&str, Operator, Vec<&str>)> = s
            .requirements()
            .iter()
            .map(|r| (r.key.as_str(), r.operator, r.values.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("s", Operator::NotIn, vec!["c"]),
                ("t", Operator::Lt, vec!["4"]),
                ("u", Operator::Gt, vec!["3"]),
                ("v", Operator::Equals, vec!["2"]),
                ("w", Operator::NotEquals, vec!["1"]),
                ("x", Operator::Exists, vec![]),
                ("y", Operator::DoesNotExist, vec![]),
                ("z", Operator::In, vec!["a", "b"]),
            ]
        );
    }

    #[test]
    fn whitespace_between_tokens_is_ignored() {
        for s in [" app = web ", "app\t==\nweb", "  app in ( web , db )", "app in(web)", " ! app", "app , env"] {
            assert!(LabelSelector::parse(s).is_ok(), "{s:?}");
        }
        assert_eq!(sel(" app  in ( db , web ) , ! tier ").to_string(), "app in (db,web),!tier");
    }

    #[test]
    fn empty_and_blank_selectors_select_everything() {
        for s in ["", "   ", "\t\n"] {
            let parsed = sel(s);
            assert!(parsed.is_empty());
            assert!(parsed.matches_json(None));
        }
        assert!(!sel("a").is_empty());
    }

    #[test]
    fn in_list_edge_forms_mean_empty_values() {
        assert_eq!(sel("a in ()").requirements()[0].values, vec![""]);
        assert_eq!(sel("a in (,x)").requirements()[0].values, vec!["", "x"]);
        assert_eq!(sel("a in (x,)").requirements()[0].values, vec!["", "x"]);
        assert_eq!(sel("a in (x,,y)").requirements()[0].values, vec!["", "x", "y"]);
        assert!(sel("a in ()").matches(&labels(&[("a", "")])));
    }

    #[test]
    fn keywords_are_identifiers_in_key_and_value_positions() {
        assert!(sel("in=notin").matches(&labels(&[("in", "notin")])));
        assert!(sel("notin in (in)").matches(&labels(&[("notin", "in")])));
    }

    #[test]
    fn prefixed_keys_and_dotted_values_parse() {
        let s = sel("app.kubernetes.io/name=my.app_1,example.com/flag");
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "my.app_1"), ("example.com/flag", "")])));
    }

    #[test]
    fn invalid_syntax_is_rejected_with_upstream_messages() {
        let cases = [
            (",", "found ',', expected: !, identifier, or 'end of string'"),
            ("=a", "found '=', expected: !, identifier, or 'end of string'"),
            ("a=b,", "found '', expected: identifier after ','"),
            ("a=b,,c", "found ',', expected: identifier after ','"),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
            ("a in b", "unable to parse requirement: found 'b' expected: '('"),
            ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
            ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
            ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
            ("a in (,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
            ("a=(", "unable to parse requirement: found '(', expected: identifier"),
            ("!", "unable to parse requirement: found '', expected: identifier"),
            ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
            ("!a=b", "found '=', expected: ',' or 'end of string'"),
            ("a=b)", "found ')', expected: ',' or 'end of string'"),
        ];
        for (s, want) in cases {
            assert_eq!(parse_err(s), want, "{s:?}");
        }
    }

    #[test]
    fn gt_and_lt_need_an_integer_value() {
        assert_eq!(
            parse_err("a>b"),
            "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert_eq!(
            parse_err("a<"),
            "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert!(LabelSelector::parse("a>10").is_ok());
        assert!(LabelSelector::parse("a<99999999999999999999").is_err());
    }

    #[test]
    fn invalid_value_is_rejected_with_upstream_message() {
        assert_eq!(
            parse_err("app=-x"),
            format!("unable to parse requirement: values[0][app]: Invalid value: \"-x\": {VALUE_MSG}")
        );
        assert_eq!(
            parse_err("app in (ok,x-)"),
            format!("unable to parse requirement: values[1][app]: Invalid value: \"x-\": {VALUE_MSG}")
        );
        assert_eq!(
            parse_err(&format!("app={}", "v".repeat(64))),
            format!(
                "unable to parse requirement: values[0][app]: Invalid value: \"{}\": must be no more than 63 characters",
                "v".repeat(64)
            )
        );
    }

    #[test]
    fn invalid_key_is_rejected_with_upstream_message() {
        assert_eq!(
            parse_err("-app=x"),
            format!("unable to parse requirement: <nil>: Invalid value: \"-app\": {NAME_PART_MSG}")
        );
        assert_eq!(
            parse_err("!a_"),
            format!("unable to parse requirement: <nil>: Invalid value: \"a_\": {NAME_PART_MSG}")
        );
        assert!(parse_err("Bad.Prefix/app").starts_with(
            "unable to parse requirement: <nil>: Invalid value: \"Bad.Prefix/app\": prefix part a lowercase RFC 1123 subdomain"
        ));
        assert!(parse_err("a/b/c=d").contains("a qualified name must consist of"));
    }

    #[test]
    fn gt_with_a_non_integer_and_invalid_value_reports_both() {
        assert_eq!(
            parse_err("a>-x"),
            format!(
                "unable to parse requirement: [values[0]: Invalid value: \"-x\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][a]: Invalid value: \"-x\": {VALUE_MSG}]"
            )
        );
    }

    #[test]
    fn matches_json_reads_metadata_labels_objects() {
        let s = sel("app=web,!legacy");
        assert!(s.matches_json(Some(&json!({"app": "web"}))));
        assert!(!s.matches_json(Some(&json!({"app": "web", "legacy": "true"}))));
        assert!(!s.matches_json(None));
        assert!(!s.matches_json(Some(&Value::Null)));
        assert!(sel("!app").matches_json(None));
        assert!(sel("app!=web").matches_json(Some(&json!({"app": 1}))));
    }

    #[test]
    fn display_round_trips_through_parse() {
        for s in ["a=1", "!a", "a", "a!=1", "a in (x,y)", "a notin (x)", "a>1", "a<2", "a=1,b in (c,d)"] {
            let parsed = sel(s);
            assert_eq!(parsed.to_string(), s);
            assert_eq!(sel(&parsed.to_string()), parsed);
        }
    }

    #[test]
    fn nothing_matches_no_labels_and_everything_matches_all() {
        assert!(!LabelSelector::nothing().matches(&labels(&[])));
        assert!(!LabelSelector::nothing().is_empty());
        assert!(LabelSelector::everything().matches(&labels(&[("a", "b")])));
        assert!(LabelSelector::everything().is_empty());
    }

    #[test]
    fn requirement_new_validates_value_counts() {
        assert_eq!(
            Requirement::new("a", Operator::In, vec![]).unwrap_err().to_string(),
            "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            Requirement::new("a", Operator::Equals, vec!["x".into(), "y".into()]).unwrap_err().to_string(),
            "values: Invalid value: []string{\"x\", \"y\"}: exact-match compatibility requires one single value"
        );
        assert_eq!(
            Requirement::new("a", Operator::Exists, vec!["x".into()]).unwrap_err().to_string(),
            "values: Invalid value: []string{\"x\"}: values set must be empty for exists and does not exist"
        );
        assert_eq!(
            Requirement::new("", Operator::Exists, vec![]).unwrap_err().to_string(),
            format!("key: Invalid value: \"\": name part must be non-empty; {NAME_PART_MSG}")
        );
    }

    // ---- structured form ----

    #[test]
    fn structured_empty_and_null_select_everything() {
        for v in [Value::Null, json!({}), json!({"matchLabels": {}, "matchExpressions": []})] {
            let s = from_label_selector_json(&v).unwrap();
            assert!(s.is_empty());
            assert!(s.matches_json(Some(&json!({"x": "y"}))));
        }
    }

    #[test]
    fn structured_match_labels_and_expressions_are_anded() {
        let s = from_label_selector_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []}
            ]
        }))
        .unwrap();
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("app", "web"), ("tier", "fe"), ("team", "x")], true),
            (&[("app", "web"), ("tier", "be"), ("team", "x"), ("env", "dev")], true),
            (&[("app", "web"), ("tier", "be"), ("team", "x"), ("env", "prod")], false),
            (&[("app", "web"), ("tier", "xx"), ("team", "x")], false),
            (&[("app", "web"), ("tier", "fe")], false),
            (&[("app", "web"), ("tier", "fe"), ("team", "x"), ("legacy", "1")], false),
            (&[("app", "db"), ("tier", "fe"), ("team", "x")], false),
        ];
        for (ls, want) in cases {
            assert_eq!(s.matches(&labels(ls)), *want, "{ls:?}");
        }
        assert_eq!(s.to_string(), "app=web,env notin (prod),!legacy,team,tier in (be,fe)");
    }

    #[test]
    fn structured_errors_name_the_field() {
        let cases = [
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                "matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
                    .to_string(),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}, {"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    .to_string(),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Foo", "values": ["x"]}]}),
                "matchExpressions[0].operator: \"Foo\" is not a valid label selector operator".to_string(),
            ),
            (
                json!({"matchExpressions": [{"key": "-a", "operator": "Exists"}]}),
                format!("matchExpressions[0].key: Invalid value: \"-a\": {NAME_PART_MSG}"),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["ok", "-x"]}]}),
                format!("matchExpressions[0].values[1]: Invalid value: \"-x\": {VALUE_MSG}"),
            ),
            (json!({"matchLabels": {"a": "-x"}}), format!("matchLabels: Invalid value: \"-x\": {VALUE_MSG}")),
            (json!({"matchLabels": {"_a": "x"}}), format!("matchLabels: Invalid value: \"_a\": {NAME_PART_MSG}")),
            (json!({"matchLabels": {"a": 1}}), "matchLabels[a]: Invalid value: 1: must be a string".to_string()),
        ];
        for (v, want) in cases {
            assert_eq!(from_label_selector_json(&v).unwrap_err().to_string(), want, "{v}");
        }
    }

    #[test]
    fn structured_multiple_errors_are_aggregated() {
        let err = from_label_selector_json(&json!({
            "matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Bar"}]
        }))
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "[matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn', matchExpressions[1].operator: \"Bar\" is not a valid label selector operator]"
        );
    }

    #[test]
    fn structured_non_object_is_rejected() {
        assert!(from_label_selector_json(&json!("app=web")).is_err());
        assert!(from_label_selector_json(&json!({"matchExpressions": {}})).is_err());
    }

    // ---- field selectors ----

    fn fields_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |f: &str| pairs.iter().find(|(k, _)| *k == f).map(|(_, v)| *v)
    }

    #[test]
    fn field_selector_operators_match() {
        let cases: &[Case] = &[
            ("metadata.name=a", &[("metadata.name", "a")], true),
            ("metadata.name=a", &[("metadata.name", "b")], false),
            ("metadata.name==a", &[("metadata.name", "a")], true),
            ("metadata.name!=a", &[("metadata.name", "b")], true),
            ("metadata.name!=a", &[("metadata.name", "a")], false),
            ("metadata.name=a,metadata.namespace=n", &[("metadata.name", "a"), ("metadata.namespace", "n")], true),
            ("metadata.name=a,metadata.namespace=n", &[("metadata.name", "a"), ("metadata.namespace", "m")], false),
            ("", &[], true),
            (",", &[], true),
        ];
        for (s, fs, want) in cases {
            let parsed = FieldSelector::parse(s).unwrap();
            assert_eq!(parsed.matches(fields_of(fs)), *want, "{s:?} against {fs:?}");
        }
    }

    #[test]
    fn field_selector_missing_field_compares_as_empty_string() {
        assert!(FieldSelector::parse("spec.nodeName=").unwrap().matches(fields_of(&[])));
        assert!(!FieldSelector::parse("spec.nodeName!=").unwrap().matches(fields_of(&[])));
        assert!(FieldSelector::parse("spec.nodeName!=n1").unwrap().matches(fields_of(&[])));
        assert!(!FieldSelector::parse("spec.nodeName=n1").unwrap().matches(fields_of(&[])));
    }

    #[test]
    fn field_selector_unescapes_values() {
        let s = FieldSelector::parse(r"a=x\,y\=z\\w,b=c").unwrap();
        assert_eq!(s.exact_value("a"), Some(r"x,y=z\w"));
        assert_eq!(s.exact_value("b"), Some("c"));
        assert_eq!(s.to_string(), r"a=x\,y\=z\\w,b=c");
        assert_eq!(FieldSelector::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn field_selector_rejects_bad_escapes_and_terms() {
        let cases = [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            ("a=b=c", "invalid field selector: unescaped character in value: 61"),
            ("a!==b", "invalid field selector: unescaped character in value: 61"),
            (r"a=b\x", r"invalid field selector: invalid escape sequence: \x"),
            (r"a=b\", r"invalid field selector: invalid escape sequence: \"),
        ];
        for (s, want) in cases {
            assert_eq!(FieldSelector::parse(s).unwrap_err().to_string(), want, "{s:?}");
        }
    }

    #[test]
    fn field_selector_does_not_trim_whitespace() {
        let s = FieldSelector::parse("a = b").unwrap();
        assert_eq!(s.fields().collect::<Vec<_>>(), vec!["a "]);
        assert_eq!(s.exact_value("a "), Some(" b"));
    }

    #[test]
    fn field_selector_lists_fields_and_exact_values() {
        let s = FieldSelector::parse("status.phase!=Failed,metadata.name=web").unwrap();
        assert_eq!(s.fields().collect::<Vec<_>>(), vec!["metadata.name", "status.phase"]);
        assert_eq!(s.exact_value("metadata.name"), Some("web"));
        assert_eq!(s.exact_value("status.phase"), None);
        assert_eq!(s.exact_value("metadata.namespace"), None);
        assert!(!s.is_empty());
        assert!(FieldSelector::parse("").unwrap().is_empty());
    }
}
