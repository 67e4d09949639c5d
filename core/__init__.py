"""The application core: the api's commands, pure, whichever transport brings them."""
