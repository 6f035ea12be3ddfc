//! Conversions between JavaScript values and the engine's types, and the
//! one way errors cross into JavaScript.

use js_sys::{Array, BigInt, BigInt64Array, BigUint64Array, Float64Array, Uint32Array};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// A JavaScript `Error` named `DentateError` carrying `msg`.
pub(crate) fn err(msg: impl std::fmt::Display) -> JsValue {
    let e = js_sys::Error::new(&msg.to_string());
    e.set_name("DentateError");
    e.into()
}

/// Largest integer a JavaScript number holds exactly (2^53 − 1).
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

fn id_from_number(x: f64, i: usize) -> Result<u64, JsValue> {
    if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= MAX_SAFE {
        Ok(x as u64)
    } else {
        Err(err(format!(
            "id {i} is {x}: ids must be non-negative integers (up to 2^53 − 1 as numbers, any u64 as BigInt)"
        )))
    }
}

fn id_from_bigint(b: BigInt, i: usize) -> Result<u64, JsValue> {
    u64::try_from(b).map_err(|_| err(format!("id {i} does not fit in an unsigned 64-bit integer")))
}

/// Ids from a `BigUint64Array`, `BigInt64Array` (non-negative),
/// `Uint32Array`, `Float64Array` or an array of numbers / BigInts.
pub(crate) fn ids_from_js(v: &JsValue) -> Result<Vec<u64>, JsValue> {
    if let Some(a) = v.dyn_ref::<BigUint64Array>() {
        return Ok(a.to_vec());
    }
    if let Some(a) = v.dyn_ref::<Uint32Array>() {
        return Ok(a.to_vec().into_iter().map(u64::from).collect());
    }
    if let Some(a) = v.dyn_ref::<BigInt64Array>() {
        return a
            .to_vec()
            .into_iter()
            .enumerate()
            .map(|(i, x)| u64::try_from(x).map_err(|_| err(format!("id {i} is negative ({x})"))))
            .collect();
    }
    if let Some(a) = v.dyn_ref::<Float64Array>() {
        return a
            .to_vec()
            .into_iter()
            .enumerate()
            .map(|(i, x)| id_from_number(x, i))
            .collect();
    }
    if Array::is_array(v) {
        let a: &Array = v.unchecked_ref();
        return a
            .iter()
            .enumerate()
            .map(|(i, x)| {
                if let Some(n) = x.as_f64() {
                    id_from_number(n, i)
                } else if x.is_bigint() {
                    id_from_bigint(x.unchecked_into::<BigInt>(), i)
                } else {
                    Err(err(format!("id {i} is not a number or a BigInt")))
                }
            })
            .collect();
    }
    Err(err(
        "ids must be a BigUint64Array, Uint32Array, Float64Array or an array of non-negative integers",
    ))
}

/// Strings from a JavaScript array of strings.
pub(crate) fn strings_from_js(v: &JsValue, what: &str) -> Result<Vec<String>, JsValue> {
    if !Array::is_array(v) {
        return Err(err(format!("{what} must be an array of strings")));
    }
    let a: &Array = v.unchecked_ref();
    a.iter()
        .enumerate()
        .map(|(i, s)| s.as_string().ok_or_else(|| err(format!("{what}[{i}] is not a string"))))
        .collect()
}

/// `obj[key]` when `obj` is an object and the key is present and not
/// `undefined`/`null`.
pub(crate) fn get(obj: &JsValue, key: &str) -> Result<Option<JsValue>, JsValue> {
    if obj.is_undefined() || obj.is_null() {
        return Ok(None);
    }
    if !obj.is_object() {
        return Err(err("options must be an object"));
    }
    let v = js_sys::Reflect::get(obj, &JsValue::from_str(key))?;
    Ok((!v.is_undefined() && !v.is_null()).then_some(v))
}

/// `obj[key]` as a string, when present.
pub(crate) fn get_string(obj: &JsValue, key: &str) -> Result<Option<String>, JsValue> {
    get(obj, key)?
        .map(|v| {
            v.as_string()
                .ok_or_else(|| err(format!("option `{key}` must be a string")))
        })
        .transpose()
}

/// `obj[key]` as a non-negative integer, when present.
pub(crate) fn get_usize(obj: &JsValue, key: &str) -> Result<Option<usize>, JsValue> {
    get(obj, key)?
        .map(|v| {
            v.as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0 && x.fract() == 0.0 && *x <= MAX_SAFE)
                .map(|x| x as usize)
                .ok_or_else(|| err(format!("option `{key}` must be a non-negative integer")))
        })
        .transpose()
}

/// `obj[key]` as a boolean, when present.
pub(crate) fn get_bool(obj: &JsValue, key: &str) -> Result<Option<bool>, JsValue> {
    get(obj, key)?
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| err(format!("option `{key}` must be a boolean")))
        })
        .transpose()
}

/// Sets `obj[key] = value`.
pub(crate) fn set(obj: &js_sys::Object, key: &str, value: impl Into<JsValue>) {
    // Setting a property on a plain object created here cannot fail.
    let _ = js_sys::Reflect::set(obj, &JsValue::from_str(key), &value.into());
}

/// What a thrown JavaScript value says: an `Error`'s message, a thrown
/// string, or "an exception".
#[cfg(feature = "memory")]
pub(crate) fn describe(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "an exception".into())
}
