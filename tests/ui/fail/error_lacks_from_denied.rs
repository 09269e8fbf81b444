use toolgate::tool;

#[derive(Debug)]
pub enum AppError {
    NotFound,
}

#[tool(risk = "READ_ONLY")]
fn get_user(id: u64) -> Result<String, AppError> {
    if id == 0 {
        return Err(AppError::NotFound);
    }
    Ok(format!("user {id}"))
}

fn main() {
    let _ = get_user(1);
}
