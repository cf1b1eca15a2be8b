"""Services own transactions and business rules; routers, CLI commands and tasks call them."""
