print("pushwarden")
