//! The shipped Argo CD health check for StatefulSets, run as Argo CD runs it: shared by the
//! table of `src/gitops/tests.rs`, the integration tests (its `health_test.yaml` cases) and the
//! real-cluster suite (the live set at each phase of a rollout).

use serde_json::Value;

/// The check, as the repository ships it (and `stateful-admission gitops argocd-lua` prints).
pub const HEALTH_LUA: &str =
    include_str!("../../gitops/argocd/resource_customizations/apps/StatefulSet/health.lua");

/// `value` as Argo CD hands an object to Lua: objects and arrays as tables, null as nil.
pub fn lua_value(lua: &mlua::Lua, value: &Value) -> mlua::Result<mlua::Value> {
    Ok(match value {
        Value::Null => mlua::Value::Nil,
        Value::Bool(b) => mlua::Value::Boolean(*b),
        Value::Number(n) => mlua::Value::Number(n.as_f64().unwrap_or_default()),
        Value::String(s) => mlua::Value::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, lua_value(lua, item)?)?;
            }
            mlua::Value::Table(table)
        }
        Value::Object(map) => {
            let table = lua.create_table()?;
            for (k, item) in map {
                table.raw_set(k.as_str(), lua_value(lua, item)?)?;
            }
            mlua::Value::Table(table)
        }
    })
}

/// Argo CD's health of `object` with the check installed: `(status, message)`. As
/// gitops-engine's `GetResourceHealth`, a set being deleted is Progressing before any check;
/// the script runs in Lua 5.1 with the base, table and string libraries (what it needs of
/// those `useOpenLibs` opens).
pub fn argocd_health(object: &Value) -> anyhow::Result<(String, String)> {
    if object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return Ok(("Progressing".into(), "Pending deletion".into()));
    }
    run_lua(HEALTH_LUA, object).map_err(|e| anyhow::anyhow!("health.lua: {e}"))
}

/// `script`'s verdict on `object`: `(status, message)`, in a Lua 5.1 state with the base,
/// table and string libraries (Argo CD opens all with `useOpenLibs`; the check needs no other).
pub fn run_lua(script: &str, object: &Value) -> mlua::Result<(String, String)> {
    let lua = mlua::Lua::new_with(
        mlua::StdLib::TABLE | mlua::StdLib::STRING,
        mlua::LuaOptions::default(),
    )?;
    lua.globals().set("obj", lua_value(&lua, object)?)?;
    let hs: mlua::Table = lua.load(script).set_name("health.lua").eval()?;
    Ok((hs.get("status")?, hs.get("message")?))
}
